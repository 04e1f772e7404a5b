"""The few Hadoop FileSystem operations dataset commits need, called from the driver.

Going through Hadoop's FileSystem (over py4j) rather than Python's ``os`` makes the
same code work on local disks, HDFS and every store Spark itself can write to.
"""

from __future__ import annotations

import time
import uuid

from pyspark.sql import SparkSession

#: Schemes whose directory rename is one atomic metadata operation. Object stores (s3a, gs,
#: abfs without a hierarchical namespace, wasb, oss, ...) copy and delete instead, so a
#: reader could see a half-renamed directory: there :mod:`pipeline.io.storage` commits
#: directories with a marker written last. ``viewfs`` counts as the store it resolves to.
ATOMIC_RENAME_SCHEMES = frozenset({"file", "hdfs", "webhdfs", "swebhdfs", "ofs", "o3fs"})


class HadoopFS:
    """The Hadoop FileSystem of ``path``, with the operations the dataset commits use, and
    the rest of :class:`pipeline.io.storage.Storage` (what the driver writes itself)."""

    def __init__(self, spark: SparkSession, path: str) -> None:
        jvm = spark.sparkContext._jvm
        self._jvm = jvm
        self._gateway = spark.sparkContext._gateway
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()
        self._Path = jvm.org.apache.hadoop.fs.Path
        self._root = path
        self.fs = self._Path(path).getFileSystem(self._conf)
        self._atomic: bool | None = None

    @property
    def atomic_rename(self) -> bool:
        """Whether a directory rename is atomic on this store (by its scheme; a ``viewfs``
        path by the scheme of the store its mount table resolves it to)."""
        if self._atomic is None:
            scheme = str(self.fs.getUri().getScheme() or "file")
            if scheme == "viewfs":
                try:
                    target = self.fs.resolvePath(self._nearest_existing(self._root))
                    scheme = str(target.toUri().getScheme() or "file")
                except Exception:  # an unresolvable mount point: be safe
                    scheme = "viewfs"
            self._atomic = scheme in ATOMIC_RENAME_SCHEMES
        return self._atomic

    def _nearest_existing(self, p: str):
        path = self.fs.makeQualified(self._Path(p))
        while path.getParent() is not None and not self.fs.exists(path):
            path = path.getParent()
        return path

    def path(self, p: str):
        return self._Path(p)

    def exists(self, p: str) -> bool:
        return bool(self.fs.exists(self._Path(p)))

    def rename(self, src: str, dst: str) -> None:
        """Rename ``src`` to ``dst``; never into an existing ``dst`` (Hadoop would nest it)."""
        if self.exists(dst):
            raise FileExistsError(f"could not rename {src} to {dst}: the target exists")
        if not self.fs.rename(self._Path(src), self._Path(dst)):
            raise OSError(f"could not rename {src} to {dst}")

    def delete(self, p: str) -> None:
        self.fs.delete(self._Path(p), True)

    def mkdirs(self, p: str) -> None:
        self.fs.mkdirs(self._Path(p))

    def list_names(self, p: str) -> list[str]:
        if not self.exists(p):
            return []
        return [s.getPath().getName() for s in self.fs.listStatus(self._Path(p))]

    def write_text(self, p: str, text: str) -> None:
        out = self.fs.create(self._Path(p), True)
        try:
            out.write(bytearray(text.encode("utf-8")))
        finally:
            out.close()

    def create_new(self, p: str, text: str) -> bool:
        """Create ``p`` holding ``text`` unless it exists (atomic on HDFS, where the
        NameNode decides; local disks go through :class:`pipeline.io.publish.LocalFS`)."""
        try:
            out = self.fs.create(self._Path(p), False)
        except Exception as exc:  # py4j wraps FileAlreadyExistsException
            if "FileAlreadyExists" in str(exc) or self.exists(p):
                return False
            raise
        try:
            out.write(bytearray(text.encode("utf-8")))
        finally:
            out.close()
        return True

    def touch(self, p: str) -> None:
        if self.exists(p):
            self.fs.setTimes(self._Path(p), int(time.time() * 1000), -1)

    def mtime(self, p: str) -> float | None:
        if not self.exists(p):
            return None
        return self.fs.getFileStatus(self._Path(p)).getModificationTime() / 1000.0

    def list_files(self, p: str) -> dict[str, int]:
        """``{path relative to p: size}`` of every file below ``p``."""
        base = self.fs.makeQualified(self._Path(p)).toString().rstrip("/") + "/"
        out = {}
        it = self.fs.listFiles(self._Path(p), True)
        while it.hasNext():
            st = it.next()
            full = st.getPath().toString()
            out[full[len(base) :] if full.startswith(base) else full] = int(st.getLen())
        return out

    def file_checksum(self, p: str) -> str | None:
        """The store's checksum of file ``p`` as ``"algorithm:hex"`` (HDFS: an MD5 of the
        blocks' CRCs, computed by the datanodes without moving the data), or None when the
        store keeps none (the local file system)."""
        try:
            checksum = self.fs.getFileChecksum(self._Path(p))
        except Exception:  # a store that does not implement it
            return None
        if checksum is None:
            return None
        return f"{checksum.getAlgorithmName()}:{bytes(checksum.getBytes()).hex()}"

    def is_local(self) -> bool:
        return str(self.fs.getUri().getScheme() or "file") == "file"

    def read_text(self, p: str) -> str:
        if not self.exists(p):
            raise FileNotFoundError(p)
        stream = self.fs.open(self._Path(p))
        try:
            return str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    # -- the rest of pipeline.io.storage.Storage
    def read_bytes(self, p: str) -> bytes:
        if not self.exists(p):
            raise FileNotFoundError(p)
        stream = self.fs.open(self._Path(p))
        try:
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def _write(self, p: str, data: bytes, *, overwrite: bool) -> None:
        out = self.fs.create(self._Path(p), overwrite)
        try:
            out.write(bytearray(data))
        finally:
            out.close()

    def replace_bytes(self, p: str, data: bytes) -> None:
        """Write ``p`` so that a reader sees the previous content or ``data``: a sibling
        renamed over it where rename is atomic, else one object written whole (an object
        store makes a new object visible only when its upload completes)."""
        if not self.atomic_rename:
            self._write(p, data, overwrite=True)
            return
        parent, _, name = p.rstrip("/").rpartition("/")
        staged = f"{parent}/.{name}.new-{uuid.uuid4().hex[:8]}"
        self._write(staged, data, overwrite=False)
        try:
            self._rename_over(staged, p)
        except BaseException:
            self.delete(staged)
            raise

    def _rename_over(self, src: str, dst: str) -> None:
        """Rename ``src`` onto ``dst``, replacing it: FileContext's rename with OVERWRITE,
        atomic on HDFS and local disks; where the store lacks it, delete then rename."""
        jvm = self._jvm
        try:
            options = self._gateway.new_array(jvm.org.apache.hadoop.fs.Options.Rename, 1)
            options[0] = jvm.org.apache.hadoop.fs.Options.Rename.OVERWRITE
            context = jvm.org.apache.hadoop.fs.FileContext.getFileContext(
                self.fs.getUri(), self._conf
            )
            context.rename(self._Path(src), self._Path(dst), options)
            return
        except Exception as exc:
            if not self.exists(src):
                raise OSError(f"could not rename {src} to {dst}: {exc}") from exc
        if self.exists(dst):
            self.delete(dst)
        self.rename(src, dst)

    def put(self, local: str, p: str) -> None:
        """Copy the local file or directory ``local`` to ``p`` (which must not exist); the
        driver's JVM reads the local files itself, nothing crosses py4j but the names."""
        if self.exists(p):
            raise FileExistsError(f"could not copy {local} to {p}: the target exists")
        parent = p.rstrip("/").rpartition("/")[0]
        if parent:
            self.mkdirs(parent)
        self.fs.copyFromLocalFile(False, False, self._Path("file://" + local), self._Path(p))

    def get(self, p: str, local: str) -> None:
        """Copy the file ``p`` to the local path ``local`` (no ``.crc`` beside it)."""
        self.fs.copyToLocalFile(False, self._Path(p), self._Path("file://" + local), True)

    def describe(self, p: str) -> str:
        return str(self.fs.makeQualified(self._Path(p)).toString())

    def qualify(self, p: str) -> tuple[str, str, str]:
        """``p`` made absolute: ``(scheme, decoded path, Hadoop path string)``.

        For ``./out/x`` on a local disk: ``("file", "/cwd/out/x", "file:/cwd/out/x")``.
        """
        q = self.fs.makeQualified(self._Path(p))
        uri = q.toUri()
        return str(uri.getScheme() or ""), str(uri.getPath()).rstrip("/"), str(q.toString())
