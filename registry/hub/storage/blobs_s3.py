"""Blobs in an S3-compatible object store: `s3://BUCKET/PREFIX` → keys `PREFIX/sha256/<aa>/<hex>` (boto3).

The endpoint and credentials come from the standard variables (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY`, `AWS_REGION`). Incoming bytes are staged in an unlinked local temp file (spooled in
memory while small), so a killed replica leaves nothing behind; `promote` PUTs each blob once, with its sha256 as
the `x-amz-checksum-sha256` the store verifies (a mismatch is refused, never stored), or as a multipart upload
that stays invisible until complete. Reads are ranged GETs streamed in chunks.
"""

from __future__ import annotations

import base64
import re
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Self

from registry import constants
from registry.errors import KernelHubError

from .blobs import CHUNK, BlobMissing, BlobStat, BlobWriter, StagedBlob, release, stage
from .leases import Leases

SPOOL_BYTES = 1024 * 1024  # staged blobs up to this size stay in memory
SINGLE_PUT_BYTES = 64 * 1024 * 1024  # larger blobs go up as multipart uploads
UPLOAD_THREADS = 16  # parallel PUTs when one commit promotes many blobs
HEX64 = re.compile(r"[0-9a-f]{64}")


class BlobStoreConfigError(KernelHubError):
    """The `--blobs s3://…` location cannot be used (bad URL, no bucket, no credentials, unreachable)."""


def parse_s3_url(url: str) -> tuple[str, str]:
    """`s3://BUCKET/PREFIX` → (bucket, prefix without slashes at the ends)."""
    m = re.fullmatch(r"s3://([a-z0-9][a-z0-9.\-]{1,61}[a-z0-9])(?:/(.*))?", url)
    if not m:
        raise BlobStoreConfigError(
            f"--blobs {url!r} is not s3://BUCKET[/PREFIX] (bucket names: 3-63 lowercase letters, digits, . and -)"
        )
    return m.group(1), (m.group(2) or "").strip("/")


def _s3_client():
    import boto3
    from botocore.config import Config

    endpoint = constants.aws_endpoint_url()
    config = Config(
        signature_version="s3v4",
        s3={"addressing_style": "path" if endpoint else "auto"},  # self-hosted stores rarely have bucket DNS
        retries={"max_attempts": 3, "mode": "standard"},
        connect_timeout=3,
        read_timeout=60,
        max_pool_connections=64,
    )
    region = constants.aws_region("us-east-1")
    return boto3.client("s3", endpoint_url=endpoint, region_name=region, config=config), endpoint


def _code(e: Exception) -> str:
    return str(getattr(e, "response", {}).get("Error", {}).get("Code", ""))


class S3BlobStore:
    """`BlobStore` on a bucket of an S3-compatible object store."""

    local_files = False

    def __init__(self, url: str, leases: Leases):
        from botocore.exceptions import BotoCoreError, ClientError

        self.bucket, self.prefix = parse_s3_url(url)
        self.leases = leases
        self.client, self.endpoint = _s3_client()
        self._pool = ThreadPoolExecutor(UPLOAD_THREADS, thread_name_prefix="s3-put")
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError as e:
            raise BlobStoreConfigError(
                f"bucket {self.bucket!r} at {self.describe()} cannot be used ({_code(e) or e}): create it first "
                "(e.g. `aws s3 mb s3://BUCKET`) and check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
            ) from None
        except BotoCoreError as e:
            raise BlobStoreConfigError(
                f"the object store at {self.describe()} cannot be reached ({e}); check AWS_ENDPOINT_URL"
            ) from None

    def key(self, sha256: str) -> str:
        return self._key("sha256", sha256[:2], sha256)

    def _key(self, *parts: str) -> str:
        return "/".join([self.prefix, *parts] if self.prefix else parts)

    # --- writing ---------------------------------------------------------------------------------
    def new_writer(self) -> BlobWriter:
        return BlobWriter(tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES))

    def stage_bytes(self, data: bytes) -> StagedBlob:
        return stage(self.new_writer(), data)

    def promote(self, *staged: StagedBlob) -> None:
        """Upload the staged blobs that are not stored yet (in parallel); each PUT is checked by its sha256."""
        self.leases.take([s.sha256 for s in staged])  # before looking: gc may be deleting an old copy
        for f in [self._pool.submit(self._put, s) for s in staged]:
            f.result()  # re-raises the first failure; the blobs put so far are harmless (leased, unreferenced)

    def _put(self, s: StagedBlob) -> None:
        try:
            if s.file is None or self.stat(s.sha256) is not None:
                return
            s.file.seek(0)
            meta = {"sha256": s.sha256}
            if s.size <= SINGLE_PUT_BYTES:
                checksum = base64.b64encode(bytes.fromhex(s.sha256)).decode()
                self.client.put_object(
                    Bucket=self.bucket, Key=self.key(s.sha256), Body=s.file, ContentLength=s.size,
                    ChecksumSHA256=checksum, Metadata=meta, ContentType="application/octet-stream",
                )  # fmt: skip
            else:
                self.client.upload_fileobj(
                    s.file, self.bucket, self.key(s.sha256), ExtraArgs={"Metadata": meta}
                )
        finally:
            release(s)

    def discard(self, staged: StagedBlob) -> None:
        release(staged)

    # --- reading ---------------------------------------------------------------------------------
    def stat(self, sha256: str) -> BlobStat | None:
        from botocore.exceptions import ClientError

        try:
            h = self.client.head_object(Bucket=self.bucket, Key=self.key(sha256))
        except ClientError as e:
            if _code(e) in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
        return BlobStat(sha256, h["ContentLength"], h["LastModified"].timestamp(), etag=h.get("ETag"))

    def exists(self, sha256: str) -> bool:
        return self.stat(sha256) is not None

    def open(self, sha256: str, start: int = 0, end: int | None = None) -> S3Reader:
        from botocore.exceptions import ClientError

        args = {"Bucket": self.bucket, "Key": self.key(sha256)}
        if start or end is not None:
            args["Range"] = f"bytes={start}-{'' if end is None else end}"
        try:
            r = self.client.get_object(**args)
        except ClientError as e:
            if _code(e) in ("404", "NoSuchKey", "NotFound"):
                raise BlobMissing(f"blob {sha256} is not in {self.describe()}") from None
            if _code(e) == "InvalidRange":
                raise BlobMissing(
                    f"blob {sha256} in {self.describe()} is shorter than byte {start}"
                ) from None
            raise
        total = r.get("ContentRange", "").rpartition("/")[2]
        return S3Reader(r["Body"], int(total) if total.isdigit() else r["ContentLength"])

    def presign(self, sha256: str, ttl_s: int, method: str = "GET") -> str | None:
        """A URL that lets anyone `method` (GET or HEAD) the blob for `ttl_s` seconds; only the host is signed,
        so Range and If-Match headers may be added to it."""
        op = {"GET": "get_object", "HEAD": "head_object"}[method]
        return self.client.generate_presigned_url(
            op, Params={"Bucket": self.bucket, "Key": self.key(sha256)}, ExpiresIn=ttl_s
        )

    # --- maintenance -------------------------------------------------------------------------------
    def iter_blobs(self) -> Iterator[BlobStat]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self._key("sha256", "")
        )
        for page in pages:
            for o in page.get("Contents", []):
                sha = o["Key"].rpartition("/")[2]
                if HEX64.fullmatch(sha):
                    yield BlobStat(sha, o["Size"], o["LastModified"].timestamp())

    def delete(self, sha256: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self.key(sha256))

    def quarantine(self, sha256: str, reason: str) -> str:
        dest = self._key("quarantine", f"{sha256}.{int(time.time())}")
        self.client.copy(
            {"Bucket": self.bucket, "Key": self.key(sha256)}, self.bucket, dest,
            ExtraArgs={"Metadata": {"reason": reason[:1000].encode("ascii", "replace").decode()},
                       "MetadataDirective": "REPLACE"},
        )  # fmt: skip
        self.delete(sha256)
        return f"s3://{self.bucket}/{dest}"

    def clean_staging(self, older_than_s: float, dry_run: bool = False) -> int:
        """Abort multipart uploads of crashed writers started more than `older_than_s` ago (`dry_run`: count)."""
        cutoff, n = time.time() - older_than_s, 0
        pages = self.client.get_paginator("list_multipart_uploads").paginate(
            Bucket=self.bucket, Prefix=self._key("sha256", "")
        )
        for page in pages:
            for u in page.get("Uploads", []):
                if u["Initiated"].timestamp() < cutoff and dry_run:
                    n += 1
                elif u["Initiated"].timestamp() < cutoff:
                    self.client.abort_multipart_upload(
                        Bucket=self.bucket, Key=u["Key"], UploadId=u["UploadId"]
                    )
                    n += 1
        return n

    def describe(self) -> str:
        where = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        return f"{where} at {self.endpoint or 'the AWS default endpoint'}"


class S3Reader:
    """A ranged GET's body, streamed; `size` is the whole object's size."""

    def __init__(self, body, size: int):
        self._body, self.size = body, size

    def read(self, n: int = -1) -> bytes:
        return self._body.read(None if n < 0 else n)

    def __iter__(self) -> Iterator[bytes]:
        return self._body.iter_chunks(CHUNK)

    def close(self) -> None:
        self._body.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
