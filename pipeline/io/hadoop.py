"""The few Hadoop FileSystem operations dataset commits need, called from the driver.

Going through Hadoop's FileSystem (over py4j) rather than Python's ``os`` makes the
same code work on local disks, HDFS and every store Spark itself can write to.
"""

from __future__ import annotations

import time

from pyspark.sql import SparkSession


class HadoopFS:
    """The Hadoop FileSystem of ``path``, with the operations the dataset commits use."""

    def __init__(self, spark: SparkSession, path: str) -> None:
        jvm = spark.sparkContext._jvm
        self._jvm = jvm
        self._Path = jvm.org.apache.hadoop.fs.Path
        self.fs = self._Path(path).getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

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

    def qualify(self, p: str) -> tuple[str, str, str]:
        """``p`` made absolute: ``(scheme, decoded path, Hadoop path string)``.

        For ``./out/x`` on a local disk: ``("file", "/cwd/out/x", "file:/cwd/out/x")``.
        """
        q = self.fs.makeQualified(self._Path(p))
        uri = q.toUri()
        return str(uri.getScheme() or ""), str(uri.getPath()).rstrip("/"), str(q.toString())
