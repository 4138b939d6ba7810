"""A minimal Django site whose media live in S3 through django-storages: the fixture the integration tests drive.

    <venv>/bin/python tests/apps/django_site/site.py <command> [args]

Configured entirely from the environment (see README.md). Each command prints one line of JSON on stdout; progress
and errors go to stderr. Exit status: 0 done, 1 failed (S3, database, no such row), 2 bad usage or configuration.
"""

import json
import logging
import os
import posixpath
import sys
import traceback
from urllib.parse import parse_qsl, unquote, urlsplit

HERE = os.path.dirname(os.path.abspath(__file__))
# The script's own directory is sys.path[0] already; said again for a caller that imports this file by path.
if HERE not in sys.path:
    sys.path.insert(0, HERE)

USAGE = """usage: site.py <command> [args]
  migrate                                      apply the migrations (contenttypes, gallery)
  upload-image <title> <filename> <size>       an Image whose file has <size> bytes
  render <image_id> <filter_spec> [size]       a Rendition of that image, named as Wagtail names them
  upload-document <title> <filename> <size>    a Document whose file has <size> bytes
  delete <Image|Rendition|Document> <id>       delete the row with the ORM (its file stays in S3)
  check                                        open every row's file through the storage
  manage <django-admin args>                   any management command (makemigrations, showmigrations, ...)
environment: DJANGO_DATABASE_URL (postgres://user[:password]@host[:port]/db), and except for migrate/manage:
  AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, DJANGO_BUCKET, DJANGO_LOCATION (may be empty),
  AWS_DEFAULT_REGION (optional, us-east-1)"""

S3_VARS = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "DJANGO_BUCKET", "DJANGO_LOCATION")

log = logging.getLogger("site")


class Usage(Exception):
    """Bad arguments or configuration: exit status 2."""


class Failed(Exception):
    """A failure worth one line, not a traceback: exit status 1."""


def database(url):
    """Django's DATABASES entry for a postgres:// URL; the `public` schema whatever the role's search_path."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise Usage(f"DJANGO_DATABASE_URL must be postgres://user@host:port/db, not {url!r}")
    try:
        port = parts.port
    except ValueError:
        raise Usage(f"DJANGO_DATABASE_URL has a bad port: {url!r}") from None
    name = unquote(parts.path.lstrip("/"))
    if not parts.hostname or not name or not parts.username:
        raise Usage(f"DJANGO_DATABASE_URL needs a user, a host and a database name: {url!r}")
    options = dict(parse_qsl(parts.query))
    options["options"] = ("-c search_path=public " + options.get("options", "")).strip()
    options.setdefault("connect_timeout", "10")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": unquote(parts.username),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname,
        "PORT": str(port or 5432),
        "OPTIONS": options,
        "CONN_MAX_AGE": 0,
    }


def s3_env():
    missing = [name for name in S3_VARS if name not in os.environ]
    missing += [name for name in S3_VARS if name in os.environ and name != "DJANGO_LOCATION" and not os.environ[name]]
    if missing:
        raise Usage("missing environment variable(s): " + ", ".join(missing))
    return {
        "endpoint_url": os.environ["AWS_ENDPOINT_URL"],
        "access_key": os.environ["AWS_ACCESS_KEY_ID"],
        "secret_key": os.environ["AWS_SECRET_ACCESS_KEY"],
        "region_name": os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
        "bucket_name": os.environ["DJANGO_BUCKET"],
        "location": os.environ["DJANGO_LOCATION"].strip("/"),
    }


def configure(needs_s3):
    url = os.environ.get("DJANGO_DATABASE_URL")
    if not url:
        raise Usage("missing environment variable(s): DJANGO_DATABASE_URL"
                    + ("" if not needs_s3 else "".join(f", {n}" for n in S3_VARS if n not in os.environ)))
    databases = {"default": database(url)}
    storages = {"staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
    if needs_s3:
        s3 = s3_env()
        storages["default"] = {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {
                **s3,
                "addressing_style": "path",
                "signature_version": "s3v4",
                "file_overwrite": False,
                "default_acl": None,
                "querystring_auth": False,
            },
        }
    from django.conf import settings

    settings.configure(
        DEBUG=False,
        SECRET_KEY="asset-sweeper-fixture-not-secret",
        INSTALLED_APPS=["django.contrib.contenttypes", "gallery"],
        DATABASES=databases,
        STORAGES=storages,
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        USE_TZ=True,
        TIME_ZONE="UTC",
        LOGGING_CONFIG=None,
    )
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="site.py: %(levelname)s %(name)s: %(message)s")
    log.setLevel(logging.INFO)
    import django

    django.setup()


# ---------------------------------------------------------------------------------------------------------------
# Helpers (after django.setup())


def storage():
    from django.core.files.storage import default_storage

    return default_storage


def s3_key(name):
    """The S3 key of a stored name: `<location>/<name>`, checked against django-storages' own mapping."""
    location = storage().location
    key = f"{location}/{name}" if location else name
    from storages.utils import clean_name

    if storage()._normalize_name(clean_name(name)) != key:
        raise Failed(f"django-storages maps {name!r} to {storage()._normalize_name(clean_name(name))!r}, not {key!r}")
    return key


_client = None


def client():
    """A plain boto3 client, independent of Django's storage, to check what is really in the bucket."""
    global _client
    if _client is None:
        import boto3
        from botocore.config import Config

        s3 = s3_env()
        _client = boto3.client(
            "s3",
            endpoint_url=s3["endpoint_url"],
            region_name=s3["region_name"],
            aws_access_key_id=s3["access_key"],
            aws_secret_access_key=s3["secret_key"],
            config=Config(s3={"addressing_style": "path"}, signature_version="s3v4"),
        )
    return _client


def head(key):
    """The object's size, or None when there is none at that key."""
    from botocore.exceptions import ClientError

    try:
        return client().head_object(Bucket=os.environ["DJANGO_BUCKET"], Key=key)["ContentLength"]
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return None
        raise


def size_arg(text):
    try:
        size = int(text)
    except ValueError:
        raise Usage(f"size must be a whole number of bytes, not {text!r}") from None
    if size < 0:
        raise Usage(f"size must not be negative: {size}")
    return size


def id_arg(text):
    try:
        return int(text)
    except ValueError:
        raise Usage(f"id must be a whole number, not {text!r}") from None


def payload(size):
    # Random bytes: two uploads never share content (or an ETag).
    return os.urandom(size)


def stored(obj, size):
    """The JSON of a row just saved with its file, once boto3 has seen the object at its key."""
    name = obj.file.name
    key = s3_key(name)
    found = head(key)
    if found is None:
        raise Failed(f"{type(obj).__name__} {obj.pk}: no object at s3://{os.environ['DJANGO_BUCKET']}/{key}")
    if found != size:
        raise Failed(f"{type(obj).__name__} {obj.pk}: s3://{os.environ['DJANGO_BUCKET']}/{key} has {found} bytes, "
                     f"not {size}")
    log.info("%s %s stored at s3://%s/%s (%d bytes)", type(obj).__name__, obj.pk, os.environ["DJANGO_BUCKET"], key, size)
    return {"id": obj.pk, "name": name, "key": key}


def model_arg(text):
    from gallery.models import Document, Image, Rendition

    models = {m.__name__.lower(): m for m in (Image, Rendition, Document)}
    try:
        return models[text.lower()]
    except KeyError:
        raise Usage(f"model must be Image, Rendition or Document, not {text!r}") from None


def row(model, pk):
    try:
        return model.objects.get(pk=pk)
    except model.DoesNotExist:
        raise Failed(f"no {model.__name__} with id {pk}") from None


# ---------------------------------------------------------------------------------------------------------------
# Commands


def migrate():
    from django.core.management import call_command
    from django.db import connection
    from django.db.migrations.recorder import MigrationRecorder

    from gallery.models import Document, Image, Rendition

    before = set(MigrationRecorder(connection).applied_migrations())
    call_command("migrate", interactive=False, verbosity=1, stdout=sys.stderr, stderr=sys.stderr)
    after = set(MigrationRecorder(connection).applied_migrations())
    return {
        "applied": [f"{app}.{name}" for app, name in sorted(after - before)],
        "tables": {m.__name__: m._meta.db_table for m in (Image, Rendition, Document)},
    }


def upload(model, title, filename, size):
    from django.core.files.base import ContentFile

    size = size_arg(size)
    obj = model(title=title)
    obj.file.save(filename, ContentFile(payload(size)), save=True)
    return stored(obj, size)


def upload_image(title, filename, size):
    from gallery.models import Image

    return upload(Image, title, filename, size)


def upload_document(title, filename, size):
    from gallery.models import Document

    return upload(Document, title, filename, size)


# Wagtail's output format extensions (wagtail.images.models.IMAGE_FORMAT_EXTENSIONS).
EXTENSIONS = {"jpeg": "jpg", "jpg": "jpg", "png": "png", "gif": "gif", "webp": "webp", "avif": "avif", "svg": "svg"}


def render(image_id, filter_spec, size="128"):
    from django.core.files.base import ContentFile

    from gallery.models import Image, Rendition

    size = size_arg(size)
    if not filter_spec:
        raise Usage("filter_spec must not be empty")
    image = row(Image, id_arg(image_id))
    # Wagtail: "<input name without extension>.<filter spec, | as .>.<output extension>", under images/.
    base, extension = posixpath.splitext(posixpath.basename(image.file.name))
    extension = EXTENSIONS.get(extension.lstrip(".").lower(), "jpg")
    filename = f"{base}.{filter_spec.replace('|', '.')}.{extension}"
    rendition = Rendition(image=image, filter_spec=filter_spec)
    rendition.file.save(filename, ContentFile(payload(size)), save=True)
    return stored(rendition, size)


def delete(model_name, pk):
    model = model_arg(model_name)
    obj = row(model, id_arg(pk))
    key = s3_key(obj.file.name)
    cascaded = []
    if model.__name__ == "Image":
        cascaded = [{"model": "Rendition", "id": r.pk, "key": s3_key(r.file.name)}
                    for r in obj.renditions.order_by("pk")]
    deleted_id = obj.pk
    obj.delete()
    log.info("deleted %s %s; its file stays at %s", model.__name__, deleted_id, key)
    return {"deleted": {"model": model.__name__, "id": deleted_id}, "key": key, "cascaded": cascaded,
            "in_bucket": head(key) is not None}


def check():
    from botocore.exceptions import ClientError

    from gallery.models import Document, Image, Rendition

    live, missing = 0, []
    for model in (Image, Rendition, Document):
        for obj in model.objects.order_by("pk"):
            name = obj.file.name
            key = s3_key(name) if name else None
            ok = False
            if name:
                try:
                    # S3File loads the object's metadata on open; django-storages raises FileNotFoundError when the
                    # object is gone.
                    obj.file.open("rb")
                    obj.file.close()
                    ok = storage().exists(name)
                except FileNotFoundError:
                    pass
                except ClientError as error:
                    if error.response.get("Error", {}).get("Code") not in ("404", "NoSuchKey", "NotFound"):
                        raise
            if ok:
                live += 1
            else:
                missing.append({"model": model.__name__, "id": obj.pk, "key": key})
    return {"live": live, "missing": missing}


COMMANDS = {
    "migrate": (migrate, 0, 0),
    "upload-image": (upload_image, 3, 3),
    "render": (render, 2, 3),
    "upload-document": (upload_document, 3, 3),
    "delete": (delete, 2, 2),
    "check": (check, 0, 0),
}


def main(argv):
    try:
        if not argv or argv[0] in ("-h", "--help", "help"):
            print(USAGE, file=sys.stderr)
            return 0 if argv else 2
        command, args = argv[0], argv[1:]
        if command == "manage":
            configure(needs_s3=all(name in os.environ for name in S3_VARS))
            from django.core.management import execute_from_command_line

            execute_from_command_line(["site.py", *args])
            return 0
        if command not in COMMANDS:
            raise Usage(f"unknown command {command!r}")
        function, least, most = COMMANDS[command]
        if not least <= len(args) <= most:
            raise Usage(f"{command} takes {least if least == most else f'{least} to {most}'} argument(s), "
                        f"not {len(args)}")
        configure(needs_s3=command != "migrate")
        result = function(*args)
    except Usage as error:
        print(f"site.py: {error}\n{USAGE}", file=sys.stderr)
        return 2
    except Failed as error:
        print(f"site.py: {error}", file=sys.stderr)
        return 1
    except Exception as error:
        traceback.print_exc(file=sys.stderr)
        print(f"site.py: {argv[0]} failed: {type(error).__name__}: {error}".rstrip(), file=sys.stderr)
        return 1
    print(json.dumps(result, separators=(",", ":")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
