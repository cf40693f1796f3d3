"""module_utils _credentials: credentials in URLs found and masked (issue 14 point 9)."""

from __future__ import annotations

import pytest

from ansible_collections.fleet.vllm.plugins.filter.mask_credentials import FilterModule
from ansible_collections.fleet.vllm.plugins.module_utils._credentials import (
    has_credentials,
    mask_all,
    mask_credentials,
    secrets_in,
)


@pytest.mark.parametrize("text, masked, secrets", [
    ("https://fleet:s3cret@pypi.example.com/simple", "https://fleet:****@pypi.example.com/simple", ["s3cret"]),
    ("https://ghp_T0KEN@github.com/x", "https://****@github.com/x", ["ghp_T0KEN"]),
    ("--extra-index-url=http://u:p%40ss@10.0.0.1:8080/simple/", "--extra-index-url=http://u:****@10.0.0.1:8080/simple/", ["p%40ss"]),
    ("GET https://hub/api?token=abc&x=1 and https://s3/o?X-Amz-Signature=f00&X-Amz-Credential=c",
     "GET https://hub/api?token=****&x=1 and https://s3/o?X-Amz-Signature=****&X-Amz-Credential=****", ["abc", "f00", "c"]),
    ("https://pypi.org/simple", "https://pypi.org/simple", []),
    ("mail user@example.com about https://h/p?q=1", "mail user@example.com about https://h/p?q=1", []),
    ("pip install failed: Looking in indexes: https://fleet:****@m/simple", "pip install failed: Looking in indexes: https://fleet:****@m/simple", ["****"]),
])
def test_mask_table(text, masked, secrets):
    assert mask_credentials(text) == masked
    assert secrets_in(text) == secrets
    assert has_credentials(text) is bool(secrets)
    assert FilterModule().filters()["mask_credentials"](text) == masked


def test_mask_all_walks_results():
    result = {"cmd": ["pip", "--index-url", "https://a:b@h/s"], "n": 1, "msg": "https://a:b@h/s", "ok": True}
    assert mask_all(result) == {"cmd": ["pip", "--index-url", "https://a:****@h/s"], "n": 1, "msg": "https://a:****@h/s",
                                "ok": True}
