"""fleet.vllm.weights_listing: the hub's tree listing of a commit -> hf_snapshot's listing, whole
(LFS files by their sha256, the others by their git blob id), filtered as huggingface_hub filters."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.fleet.vllm.plugins.filter.weights_plan import weights_listing

SHA256 = "a" * 64
BLOB = "b" * 40

# The shape of GET /api/models/REPO/tree/COMMIT?recursive=true on the Hub (directories, LFS files
# with their sha256 as lfs.oid, small files with their git blob id as oid).
TREE = [
    {"type": "directory", "oid": "c" * 40, "size": 0, "path": "tokenizer"},
    {"type": "file", "oid": BLOB, "size": 120, "path": "config.json"},
    {"type": "file", "oid": "d" * 40, "size": 133, "path": "model-00001-of-00002.safetensors",
     "lfs": {"oid": SHA256, "size": 5000000000, "pointerSize": 135}},
    {"type": "file", "oid": "e" * 40, "size": 134, "path": "model-00002-of-00002.safetensors",
     "lfs": {"oid": "sha256:" + "f" * 64}},
    {"type": "file", "oid": "1" * 40, "size": 7, "path": "tokenizer/vocab.txt"},
    {"type": "file", "oid": "2" * 40, "size": 9, "path": "docs/README.md"},
    "not an entry",
]


def test_every_entry_in_full():
    assert weights_listing(TREE) == [
        dict(path="config.json", size=120, git_sha1=BLOB),
        dict(path="model-00001-of-00002.safetensors", size=5000000000, sha256=SHA256),
        # an LFS entry without its own size keeps the entry's; a "sha256:" prefix is dropped
        dict(path="model-00002-of-00002.safetensors", size=134, sha256="f" * 64),
        dict(path="tokenizer/vocab.txt", size=7, git_sha1="1" * 40),
        dict(path="docs/README.md", size=9, git_sha1="2" * 40),
    ]


@pytest.mark.parametrize("allow, ignore, paths", [
    ("*.json", None, ["config.json"]),
    (["*.safetensors", "tokenizer/"], None,
     ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "tokenizer/vocab.txt"]),
    ("tokenizer/", None, ["tokenizer/vocab.txt"]),
    (None, "docs/", ["config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                     "tokenizer/vocab.txt"]),
    (None, ["*.safetensors", "*.md"], ["config.json", "tokenizer/vocab.txt"]),
    ([], [], ["config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
              "tokenizer/vocab.txt", "docs/README.md"]),
    # "tokenizer" (no slash) is a file name pattern: the directory's files do not match it
    ("tokenizer", None, []),
])
def test_patterns_as_huggingface_hub_reads_them(allow, ignore, paths):
    assert [item["path"] for item in weights_listing(TREE, allow, ignore)] == paths


@pytest.mark.parametrize("tree, message", [
    ({"files": []}, "weights_listing: the hub's tree listing is a JSON list of entries, got dict"),
    ([{"type": "file", "oid": BLOB, "path": ""}],
     "weights_listing: a file entry without a path: {'type': 'file', 'oid': '%s', 'path': ''}" % BLOB),
    ([{"type": "file", "oid": BLOB, "path": 3}],
     "weights_listing: a file entry without a path: {'type': 'file', 'oid': '%s', 'path': 3}" % BLOB),
    ([{"type": "file", "size": 3, "path": "x.bin", "lfs": {"size": 3}}],
     "weights_listing: the hub lists x.bin without a git blob id (oid) or an LFS sha256: it cannot be verified; is "
     "this a Hugging Face Hub API?"),
])
def test_errors_in_full(tree, message):
    with pytest.raises(AnsibleFilterError) as caught:
        weights_listing(tree)
    assert str(caught.value) == message
