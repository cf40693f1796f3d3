"""The hub_revision lookup against a local HTTP server that answers the Hub API's revision and
tree endpoints as the Hub does (the tree paginated with a Link header), and records what it was
asked and with which Authorization header."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleLookupError

import yaml
from ansible import constants as C

from ansible_collections.fleet.vllm.plugins.lookup import hub_revision
from tests.hub.api_server import HubApi

REPO = "nvidia/Kimi-K2.5-NVFP4"
SHA = "a45267417813fc76eec8350af9f643b68aa5d195"
TOKEN = "hf_fleetvllmTestTokenNotReal0123456789"
PAGE1 = [{"type": "file", "path": "config.json", "size": 3481, "oid": "5c2b8e37d8a0a4b2a0c1a3b5f3a51b4b25b1e2a1"}]
PAGE2 = [{"type": "file", "path": "model-00001-of-00001.safetensors", "size": 135, "oid": "%040x" % 1,
          "lfs": {"oid": "%064x" % 1, "size": 5000000, "pointerSize": 135}}]


@pytest.fixture
def hub():
    servers = []

    def start(routes):
        servers.append(HubApi(routes))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def lookup(*terms, **options):
    """The lookup with its options defined from its documentation, as Ansible's plugin loader does."""
    name = "fleet.vllm.hub_revision"
    C.config.initialize_plugin_configuration_definitions(
        "lookup", name, yaml.safe_load(hub_revision.DOCUMENTATION)["options"])
    plugin = hub_revision.LookupModule()
    plugin._load_name = name
    return plugin.run(list(terms), variables={}, **options)


def routes(tree_pages=True):
    tree = "/api/models/%s/tree/%s?recursive=true" % (REPO, SHA)
    found = {"/api/models/%s/revision/main" % REPO: (200, {"id": REPO, "sha": SHA, "siblings": []})}
    if tree_pages:
        found[tree] = (200, PAGE1, {"Link": '<{endpoint}%s&cursor=2>; rel="next"' % tree})
        found[tree + "&cursor=2"] = (200, PAGE2)
    return found


def test_the_commit_and_every_page_of_its_files_with_the_token_in_a_header(hub):
    server = hub(routes())
    assert lookup(REPO, revision="main", endpoint=server.endpoint + "/", token=TOKEN, token_over_http=True) == [
        {"commit": SHA, "files": PAGE1 + PAGE2}]
    assert server.requests == [
        ("/api/models/%s/revision/main" % REPO, "Bearer " + TOKEN),
        ("/api/models/%s/tree/%s?recursive=true" % (REPO, SHA), "Bearer " + TOKEN),
        ("/api/models/%s/tree/%s?recursive=true&cursor=2" % (REPO, SHA), "Bearer " + TOKEN),
    ]


def test_without_files_only_the_commit_is_asked_and_no_token_no_header(hub):
    server = hub(routes(tree_pages=False))
    assert lookup(REPO, revision="main", endpoint=server.endpoint, files=False) == [{"commit": SHA, "files": []}]
    assert server.requests == [("/api/models/%s/revision/main" % REPO, None)]


def test_a_revision_with_a_slash_is_quoted(hub):
    server = hub({"/api/models/%s/revision/refs%%2Fpr%%2F3" % REPO: (200, {"sha": SHA})})
    assert lookup(REPO, revision="refs/pr/3", endpoint=server.endpoint, files=False)[0]["commit"] == SHA


def test_an_error_names_the_request_and_what_to_check_and_never_the_token(hub):
    server = hub({})
    with pytest.raises(AnsibleLookupError) as error:
        lookup(REPO, revision="main", endpoint=server.endpoint, token=TOKEN, token_over_http=True)
    url = "%s/api/models/%s/revision/main" % (server.endpoint, REPO)
    assert str(error.value) == (
        "Cannot resolve %s at revision main from %s (GET %s): HTTP 404 Not Found. Check the endpoint, the repository, "
        "the revision and, for a gated or private model, the token." % (REPO, server.endpoint, url))
    with pytest.raises(AnsibleLookupError) as error:
        lookup(REPO, revision="main", endpoint=server.endpoint, hint="Check fleet_vllm_hub_endpoint.")
    assert str(error.value).endswith("HTTP 404 Not Found. Check fleet_vllm_hub_endpoint.")
    assert TOKEN not in str(error.value)


@pytest.mark.parametrize("body, why", [
    ({"id": REPO}, "the answer has no commit sha"),
    (b"<html>login</html>", "the answer is not JSON"),
])
def test_an_answer_without_a_commit_is_refused(hub, body, why):
    server = hub({"/api/models/%s/revision/main" % REPO: (200, body)})
    with pytest.raises(AnsibleLookupError, match="^Cannot resolve %s at revision main from .*: %s\\. " % (REPO, why)):
        lookup(REPO, revision="main", endpoint=server.endpoint)


def test_a_tree_that_is_not_a_list_is_refused(hub):
    found = routes(tree_pages=False)
    found["/api/models/%s/tree/%s?recursive=true" % (REPO, SHA)] = (200, {"error": "no"})
    server = hub(found)
    with pytest.raises(AnsibleLookupError, match="^Cannot list the files of %s at revision %s from .*: the answer is not a JSON "
                                                 "list of files\\. " % (REPO, SHA)):
        lookup(REPO, revision="main", endpoint=server.endpoint)


@pytest.mark.parametrize("options, message", [
    ({"revision": "main", "endpoint": "ftp://hub"}, "hub_revision: endpoint 'ftp://hub' is not an http(s) URL"),
    ({"revision": "ma in", "endpoint": "http://hub"}, "hub_revision: revision 'ma in' is empty or has blanks"),
])
def test_bad_options_are_named(options, message):
    with pytest.raises(AnsibleLookupError) as error:
        lookup(REPO, **options)
    assert str(error.value) == message


def test_a_bad_repository_name_is_named():
    with pytest.raises(AnsibleLookupError) as error:
        lookup("Kimi-K2.5-NVFP4", revision="main", endpoint="http://hub")
    assert str(error.value) == "hub_revision: 'Kimi-K2.5-NVFP4' is not a repository name owner/name"


def test_without_resolve_the_revision_is_listed_as_named(hub):
    tree = "/api/models/%s/tree/main?recursive=true" % REPO
    server = hub({tree: (200, PAGE1)})
    assert lookup(REPO, revision="main", endpoint=server.endpoint, resolve=False) == [{"commit": None, "files": PAGE1}]
    assert server.requests == [(tree, None)]
    by_sha = hub({"/api/models/%s/tree/%s?recursive=true" % (REPO, SHA): (200, PAGE2)})
    assert lookup(REPO, revision=SHA, endpoint=by_sha.endpoint, resolve=False) == [{"commit": SHA, "files": PAGE2}]


# ---- issue 24 point 13: the token stays with the endpoint's origin --------------------------------
# The Hub's Link header and its redirects name any URL: a mirror (or whoever answers for it) could
# send the listing on to a host of its choice, and the Authorization header went along. Only a request
# to the endpoint's own scheme, host and port carries it; the listing is still read from elsewhere.

TREE = "/api/models/%s/tree/%s?recursive=true" % (REPO, SHA)


def test_a_next_page_on_another_port_gets_no_token(hub):
    other = hub({TREE + "&cursor=2": (200, PAGE2)})
    found = routes(tree_pages=False)
    found[TREE] = (200, PAGE1, {"Link": '<%s%s&cursor=2>; rel="next"' % (other.endpoint, TREE)})
    server = hub(found)
    assert lookup(REPO, revision="main", endpoint=server.endpoint, token=TOKEN, token_over_http=True) == [
        {"commit": SHA, "files": PAGE1 + PAGE2}]
    assert [auth for dummy, auth in server.requests] == ["Bearer " + TOKEN] * 2
    assert other.requests == [(TREE + "&cursor=2", None)]


def test_a_next_page_on_another_host_name_of_the_same_port_gets_no_token(hub):
    """localhost and 127.0.0.1 are one server here, two origins to a browser and to the lookup."""
    found = routes()
    found[TREE] = (200, PAGE1, {"Link": '<{endpoint}%s&cursor=2>; rel="next"' % TREE})
    server = hub(found)
    server.routes[TREE] = (200, PAGE1, {"Link": '<%s%s&cursor=2>; rel="next"'
                                        % (server.endpoint.replace("127.0.0.1", "localhost"), TREE)})
    lookup(REPO, revision="main", endpoint=server.endpoint, token=TOKEN, token_over_http=True)
    assert server.requests[-1] == (TREE + "&cursor=2", None)
    assert all(auth == "Bearer " + TOKEN for dummy, auth in server.requests[:-1])


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_to_another_origin_gets_no_token(hub, code):
    other = hub({"/api/models/%s/revision/main" % REPO: (200, {"sha": SHA})})
    server = hub({"/api/models/%s/revision/main" % REPO: (
        code, b"", {"Location": "%s/api/models/%s/revision/main" % (other.endpoint, REPO)})})
    assert lookup(REPO, revision="main", endpoint=server.endpoint, token=TOKEN, token_over_http=True,
                  files=False)[0]["commit"] == SHA
    assert server.requests == [("/api/models/%s/revision/main" % REPO, "Bearer " + TOKEN)]
    assert other.requests == [("/api/models/%s/revision/main" % REPO, None)]


def test_a_redirect_within_the_origin_keeps_the_token(hub):
    server = hub({"/api/models/%s/revision/main" % REPO: (302, b"", {"Location": "/api/models/%s/revision/v2" % REPO}),
                  "/api/models/%s/revision/v2" % REPO: (200, {"sha": SHA})})
    assert lookup(REPO, revision="main", endpoint=server.endpoint, token=TOKEN, token_over_http=True,
                  files=False)[0]["commit"] == SHA
    assert [auth for dummy, auth in server.requests] == ["Bearer " + TOKEN] * 2


def test_a_redirect_out_of_http_is_refused(hub):
    server = hub({"/api/models/%s/revision/main" % REPO: (302, b"", {"Location": "file:///etc/passwd"})})
    with pytest.raises(AnsibleLookupError, match="redirected to file:///etc/passwd, which is not an http"):
        lookup(REPO, revision="main", endpoint=server.endpoint, files=False)


def test_a_token_over_plain_http_is_refused_naming_the_variable_and_nothing_is_sent(hub):
    server = hub(routes())
    with pytest.raises(AnsibleLookupError) as error:
        lookup(REPO, revision="main", endpoint=server.endpoint, token=TOKEN, endpoint_variable="vllm_weights_controller_endpoint")
    message = str(error.value)
    assert message.startswith("hub_revision: a token is set and vllm_weights_controller_endpoint (%s) is plain http"
                              % server.endpoint), message
    assert "use an https endpoint" in message and "fleet_vllm_hf_token_over_http: true" in message
    assert TOKEN not in message and server.requests == []


def code_routes(served=None):
    """A commit with a code file and a config, listed by their git blob ids; ``served``: what the resolve URL answers
    for modeling_kimi.py instead (an endpoint answering two different files for one commit)."""
    import hashlib

    modeling, config = b"class KimiModel: pass\n", b'{"auto_map": {"AutoModel": "modeling_kimi.KimiModel"}}'
    tree = [{"type": "file", "path": path, "size": len(body), "oid": hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()}
            for path, body in (("config.json", config), ("modeling_kimi.py", modeling))] + PAGE2
    return modeling, config, {
        "/api/models/%s/tree/%s?recursive=true" % (REPO, SHA): (200, tree),
        "/%s/resolve/%s/config.json" % (REPO, SHA): (200, config),
        "/%s/resolve/%s/modeling_kimi.py" % (REPO, SHA): (200, served if served is not None else modeling)}


def test_contents_fetches_the_code_and_config_files_checked_against_the_listing(hub):
    import hashlib

    modeling, config, found = code_routes()
    server = hub(found)
    result = lookup(REPO, revision=SHA, endpoint=server.endpoint, resolve=False, token=TOKEN, token_over_http=True,
                    contents=["*.py", "*config.json"])[0]
    assert result["contents"] == {"config.json": {"sha256": hashlib.sha256(config).hexdigest(), "text": config.decode()},
                                  "modeling_kimi.py": {"sha256": hashlib.sha256(modeling).hexdigest(),
                                                       "text": modeling.decode()}}
    # The shard is never fetched; the files are asked by commit, with the token (same origin).
    assert [path for path, dummy in server.requests] == [
        "/api/models/%s/tree/%s?recursive=true" % (REPO, SHA), "/%s/resolve/%s/config.json" % (REPO, SHA),
        "/%s/resolve/%s/modeling_kimi.py" % (REPO, SHA)]
    assert {auth for dummy, auth in server.requests} == {"Bearer " + TOKEN}


def test_contents_that_differ_from_the_listing_fail_the_lookup(hub):
    dummy, dummy, found = code_routes(served=b"import os; os.system('id')\n")
    server = hub(found)
    with pytest.raises(AnsibleLookupError, match="fetch modeling_kimi.py of %s at %s .* is not the one the listing gives"
                       % (REPO, SHA)):
        lookup(REPO, revision=SHA, endpoint=server.endpoint, resolve=False, contents=["*.py"])


def test_contents_need_a_commit(hub):
    server = hub({"/api/models/%s/tree/main?recursive=true" % REPO: (200, PAGE1)})
    with pytest.raises(AnsibleLookupError, match="contents needs a commit sha, and main is not one"):
        lookup(REPO, revision="main", endpoint=server.endpoint, resolve=False, contents=["*.py"])
