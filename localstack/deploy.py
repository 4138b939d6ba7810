"""The LocalStack deploy (see localstack/deploy): package, secret, stack. Reads the SDK's usual environment."""

import json
import hashlib
import os
import re
import sys

import boto3
from botocore.exceptions import ClientError, WaiterError

root, stack, architecture, database_url = sys.argv[1:5]
overrides = []
for pair in sys.argv[5:]:
    key, sep, value = pair.partition("=")
    if not sep or not key:
        sys.exit(f"deploy: {pair!r} is not a Parameter=value pair")
    overrides.append({"ParameterKey": key, "ParameterValue": value})
endpoint = os.environ["AWS_ENDPOINT_URL"]
s3 = boto3.client("s3", endpoint_url=endpoint)
secrets = boto3.client("secretsmanager", endpoint_url=endpoint)
cfn = boto3.client("cloudformation", endpoint_url=endpoint)

code_bucket = f"{stack}-code"
try:
    s3.create_bucket(Bucket=code_bucket)
except ClientError as e:
    if e.response["Error"]["Code"] not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
        raise

# What `sam package` does: each function's local CodeUri becomes the S3 location of its built code.
template = open(os.path.join(root, "infra", "template.yaml")).read()
# The build lands where cargo puts it (CARGO_TARGET_DIR, else target/). The key names the code by its content, as
# `sam package` does: a changed build changes the template, so CloudFormation updates the function.
target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(root, "target")
for logical_id, binary in (("SweepFunction", "sweep-lambda"), ("ConsumerFunction", "consumer-lambda")):
    built = os.path.join(target, "localstack", binary, "bootstrap.zip")
    with open(built, "rb") as f:
        key = f"{binary}-{hashlib.sha256(f.read()).hexdigest()[:20]}.zip"
    s3.upload_file(built, code_bucket, key)
    block = re.compile(rf"(\n  {logical_id}:\n(?:    .*\n|\n)*?      CodeUri: )\.\./")
    template, found = block.subn(rf"\g<1>s3://{code_bucket}/{key}", template, count=1)
    if found != 1:
        sys.exit(f"deploy: no CodeUri found for {logical_id} in infra/template.yaml")


def secret(name, value):
    """The ARN of secret `name`, created or given `value`."""
    try:
        return secrets.create_secret(Name=name, SecretString=value)["ARN"]
    except ClientError as e:
        if e.response["Error"]["Code"] != "ResourceExistsException":
            raise
        return secrets.put_secret_value(SecretId=name, SecretString=value)["ARN"]


# One secret per function: each function's role may read only its own, and each holds the connection of the
# function's own database login (docs/security.md), when the caller made them (the demo does:
# SWEEP_DATABASE_URL, CONSUMER_DATABASE_URL); else the given connection, for both.
sweep_secret_arn = secret(f"{stack}/database/sweep", os.environ.get("SWEEP_DATABASE_URL") or database_url)
consumer_secret_arn = secret(f"{stack}/database/consumer", os.environ.get("CONSUMER_DATABASE_URL") or database_url)

parameters = [
    {"ParameterKey": "SweepDatabaseSecretArn", "ParameterValue": sweep_secret_arn},
    {"ParameterKey": "ConsumerDatabaseSecretArn", "ParameterValue": consumer_secret_arn},
    {"ParameterKey": "FunctionArchitecture", "ParameterValue": architecture},
    {"ParameterKey": "S3ForcePathStyle", "ParameterValue": "true"},
]
overridden = {o["ParameterKey"] for o in overrides}
parameters = [p for p in parameters if p["ParameterKey"] not in overridden] + overrides
# From S3, as `sam deploy` sends a template past CloudFormation's 51 200 bytes inline.
template_key = f"template-{hashlib.sha256(template.encode()).hexdigest()[:20]}.yaml"
s3.put_object(Bucket=code_bucket, Key=template_key, Body=template.encode())
arguments = dict(
    StackName=stack,
    TemplateURL=f"https://{code_bucket}.s3.amazonaws.com/{template_key}",
    Parameters=parameters,
    Capabilities=["CAPABILITY_IAM", "CAPABILITY_AUTO_EXPAND"],
)
try:
    status = cfn.describe_stacks(StackName=stack)["Stacks"][0]["StackStatus"]
except ClientError:
    status = None
if status in ("CREATE_FAILED", "ROLLBACK_COMPLETE", "ROLLBACK_FAILED", "DELETE_FAILED"):
    # A stack that never came up cannot be updated: start again.
    cfn.delete_stack(StackName=stack)
    cfn.get_waiter("stack_delete_complete").wait(StackName=stack, WaiterConfig={"Delay": 2, "MaxAttempts": 150})
    status = None
exists = status is not None


def failed_resources():
    """What CloudFormation said of each resource that failed, so a failed deploy names its cause."""
    events = cfn.describe_stack_events(StackName=stack).get("StackEvents", [])
    for event in reversed(events):
        if event.get("ResourceStatus", "").endswith("_FAILED"):
            print(
                f"deploy: {event.get('LogicalResourceId')} ({event.get('ResourceType')}): "
                f"{event.get('ResourceStatus')}: {event.get('ResourceStatusReason')}",
                file=sys.stderr,
            )


try:
    if exists:
        try:
            cfn.update_stack(**arguments)
            cfn.get_waiter("stack_update_complete").wait(StackName=stack, WaiterConfig={"Delay": 2, "MaxAttempts": 150})
        except ClientError as e:
            if "No updates are to be performed" not in str(e):
                raise
    else:
        cfn.create_stack(**arguments)
        cfn.get_waiter("stack_create_complete").wait(StackName=stack, WaiterConfig={"Delay": 2, "MaxAttempts": 150})
except WaiterError:
    failed_resources()
    raise

described = cfn.describe_stacks(StackName=stack)["Stacks"][0]
outputs = {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])}
print(json.dumps({"stack": stack, "status": described["StackStatus"], "outputs": outputs}, indent=2))
