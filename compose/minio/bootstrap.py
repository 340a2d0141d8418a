"""Create the fixture bucket on the MinIO test fixture (compose.test.yaml, service minio-bootstrap).

Standard library only (no boto3, no mc: the MinIO client image is unavailable too), so it runs on
a stock python:3 image without installing anything. It signs one S3 CreateBucket request with AWS
Signature Version 4, sending the x-amz-content-sha256 header that SigV4-checking servers require
(curl's --aws-sigv4 on Debian 12 omits it), then confirms the bucket with HeadBucket.

Idempotent: an existing bucket owned by the same credentials counts as success. The credentials
are fixture-only values from compose.test.yaml; they are never printed.

Environment: S3_ENDPOINT (e.g. http://minio:9000), S3_REGION, S3_BUCKET, S3_ACCESS_KEY,
S3_SECRET_KEY; optional BOOTSTRAP_ATTEMPTS (default 30, one per second).
"""

import datetime
import hashlib
import hmac
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def _sign(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode("utf-8"), hashlib.sha256).digest()


def signed_request(method, endpoint, path, region, access_key, secret_key, now=None):
    """Return a urllib Request for a path-style S3 call with an empty body, signed with SigV4."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    date_stamp = now.strftime("%Y%m%d")
    url = urllib.parse.urlsplit(endpoint)
    host = url.netloc
    canonical_uri = urllib.parse.quote(path, safe="/-_.~")
    canonical_headers = (
        f"host:{host}\n"
        f"x-amz-content-sha256:{EMPTY_SHA256}\n"
        f"x-amz-date:{amz_date}\n"
    )
    signed_headers = "host;x-amz-content-sha256;x-amz-date"
    canonical_request = "\n".join(
        [method, canonical_uri, "", canonical_headers, signed_headers, EMPTY_SHA256]
    )
    scope = f"{date_stamp}/{region}/s3/aws4_request"
    string_to_sign = "\n".join(
        [
            "AWS4-HMAC-SHA256",
            amz_date,
            scope,
            hashlib.sha256(canonical_request.encode("utf-8")).hexdigest(),
        ]
    )
    k_date = _sign(("AWS4" + secret_key).encode("utf-8"), date_stamp)
    k_signing = _sign(_sign(_sign(k_date, region), "s3"), "aws4_request")
    signature = hmac.new(k_signing, string_to_sign.encode("utf-8"), hashlib.sha256).hexdigest()
    headers = {
        "Host": host,
        "x-amz-date": amz_date,
        "x-amz-content-sha256": EMPTY_SHA256,
        "Authorization": (
            f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, "
            f"SignedHeaders={signed_headers}, Signature={signature}"
        ),
    }
    target = f"{url.scheme}://{host}{canonical_uri}"
    return urllib.request.Request(target, data=b"" if method == "PUT" else None,
                                  headers=headers, method=method)


def call(method, cfg, path):
    """Return (status, body) of one signed request; HTTP errors are returned, not raised."""
    req = signed_request(method, cfg["endpoint"], path, cfg["region"], cfg["access_key"],
                         cfg["secret_key"])
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode("utf-8", "replace")


def main() -> int:
    try:
        cfg = {
            "endpoint": os.environ["S3_ENDPOINT"].rstrip("/"),
            "region": os.environ["S3_REGION"],
            "bucket": os.environ["S3_BUCKET"],
            "access_key": os.environ["S3_ACCESS_KEY"],
            "secret_key": os.environ["S3_SECRET_KEY"],
        }
    except KeyError as missing:
        print(f"minio-bootstrap: environment variable {missing} is not set", file=sys.stderr)
        return 2
    attempts = int(os.environ.get("BOOTSTRAP_ATTEMPTS", "30"))
    path = "/" + cfg["bucket"]

    for attempt in range(1, attempts + 1):
        try:
            status, body = call("PUT", cfg, path)
        except OSError as err:  # connection refused, DNS not ready yet, timeout
            print(f"minio-bootstrap: attempt {attempt}/{attempts}: {cfg['endpoint']} "
                  f"not reachable ({err.__class__.__name__})", file=sys.stderr)
            time.sleep(1)
            continue
        if status == 200:
            print(f"minio-bootstrap: created bucket {cfg['bucket']}")
        elif status == 409 and "BucketAlreadyOwnedByYou" in body:
            print(f"minio-bootstrap: bucket {cfg['bucket']} already exists")
        else:
            code = body.split("<Code>")[1].split("</Code>")[0] if "<Code>" in body else ""
            print(f"minio-bootstrap: CreateBucket {cfg['bucket']} failed: HTTP {status} {code}",
                  file=sys.stderr)
            return 1
        status, _ = call("HEAD", cfg, path)
        if status != 200:
            print(f"minio-bootstrap: HeadBucket {cfg['bucket']} returned HTTP {status}",
                  file=sys.stderr)
            return 1
        print(f"minio-bootstrap: bucket {cfg['bucket']} is ready at {cfg['endpoint']} "
              f"(region {cfg['region']})")
        return 0

    print(f"minio-bootstrap: gave up after {attempts} attempts", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
