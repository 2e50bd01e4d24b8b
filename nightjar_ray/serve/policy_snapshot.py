"""Where the policy actor keeps its snapshot: a local path or an object-store URI.

A location is an absolute local path (``/mnt/pool``), a ``file://`` URI, or an object-store
URI (``s3://bucket/prefix``, ``gs://bucket/prefix``; query options such as
``?endpoint_override=`` or ``?region=`` are passed to the filesystem), opened with
``pyarrow.fs.FileSystem.from_uri``. Object stores take their credentials from the
environment (AWS's default chain, Google's application default credentials), which on
Kubernetes is the pod's service account.

Invariant: a reader sees a whole snapshot, the previous or the new one, never part of one.

- Local filesystem: the text goes to ``<name>.tmp`` beside the snapshot, which is then
  renamed over it (a rename within one filesystem is atomic).
- Object store: one object written by one upload; the store makes it visible only when
  the upload completes (S3's PutObject or CompleteMultipartUpload, GCS's finalized
  upload) and replaces the previous object whole. There is no rename (a "move" there is
  a copy and a delete), and none is needed.
"""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyarrow import fs as pafs


def snapshot_location(snapshot_dir: str, actor_name: str) -> str:
    """The snapshot of actor ``actor_name`` in ``snapshot_dir`` (a path or a URI whose
    query string, if any, stays at the end)."""
    base, sep, query = snapshot_dir.partition("?")
    return f"{base.rstrip('/')}/{actor_name}.json{sep}{query}"


class SnapshotFile:
    """One JSON snapshot at a local path or object-store URI (see module docstring).

    The filesystem is opened on first use, so an unreachable store shows up as an
    ``OSError`` of a read or a write, not of the constructor."""

    def __init__(self, location: str) -> None:
        self.location = location
        self._opened: tuple[pafs.FileSystem, str] | None = None

    def _filesystem(self) -> tuple[pafs.FileSystem, str]:
        from pyarrow import fs

        if self._opened is None:
            if "://" in self.location:
                self._opened = fs.FileSystem.from_uri(self.location)
            else:
                self._opened = fs.LocalFileSystem(), self.location
        return self._opened

    def read_text(self) -> str | None:
        """The snapshot's text; ``None`` when there is none. Raises ``OSError`` when the
        store cannot be read or the location is not a file."""
        from pyarrow import fs

        filesystem, path = self._filesystem()
        info = filesystem.get_file_info(path)
        if info.type == fs.FileType.NotFound:
            return None
        if info.type != fs.FileType.File:
            raise OSError(f"{self.location} is not a file")
        with filesystem.open_input_stream(path) as stream:
            data: bytes = stream.read()
        return data.decode()

    def write_text(self, text: str) -> None:
        """Replace the snapshot with ``text``, whole (see module docstring)."""
        from pyarrow import fs

        filesystem, path = self._filesystem()
        data = text.encode()
        if not isinstance(filesystem, fs.LocalFileSystem):
            with filesystem.open_output_stream(path) as stream:
                stream.write(data)
            return
        filesystem.create_dir(posixpath.dirname(path), recursive=True)
        tmp = f"{path}.tmp"
        with filesystem.open_output_stream(tmp) as stream:
            stream.write(data)
        filesystem.move(tmp, path)
