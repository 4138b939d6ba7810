"""A LocalStack Lambda runtime executor that runs a function's `bootstrap` as a local child process."""
