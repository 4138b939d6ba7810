"""The media models of a small CMS, written the way Wagtail and the Django docs write them.

Each row stores its file's *name* (relative to the storage's location); the S3 key is `<location>/<name>`.
Deleting a row does not delete its file: Django leaves it in the bucket.
"""

from django.db import models


class Image(models.Model):
    title = models.CharField(max_length=255)
    # An ImageField would need Pillow; the stored column (a varchar name) is the same.
    file = models.FileField(upload_to="original_images")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    def __str__(self):
        return self.title


class Rendition(models.Model):
    """A resized copy of an Image, as Wagtail's `wagtailimages_rendition`."""

    image = models.ForeignKey(Image, on_delete=models.CASCADE, related_name="renditions")
    filter_spec = models.CharField(max_length=255, db_index=True)
    file = models.FileField(upload_to="images")

    def __str__(self):
        return f"{self.image_id}:{self.filter_spec}"


class Document(models.Model):
    title = models.CharField(max_length=255)
    file = models.FileField(upload_to="documents/%Y/%m")

    def __str__(self):
        return self.title
