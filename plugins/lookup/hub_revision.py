# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: hub_revision
short_description: The commit of a model revision and its files, as the Hugging Face Hub (or a site mirror) lists them
version_added: "0.3.0"
author: fleet.vllm developers (@fleet-vllm)
description:
  - Asks the Hub API, from the controller, for the commit a revision (branch, tag or commit) of a model repository
    points at (C(GET /api/models/REPO/revision/REVISION)) and, with O(files), for that commit's files
    (C(GET /api/models/REPO/tree/COMMIT?recursive=true), every page of it).
  - A lookup runs in the controller's own process - no module is sent anywhere - so the roles ask it once per play
    for the price of the HTTP requests, where an M(ansible.builtin.uri) task costs a module run.
  - The token, when given, goes in an C(Authorization) header and never into a message, and only to the scheme, host
    and port of O(endpoint) - a C(Link) next page or a redirect to another origin is followed without it (the Hub's
    answers name any URL, and a mirror, or whoever answers for it, could send the token on to a host of its choice).
  - A token with an C(http://) O(endpoint) is refused unless O(token_over_http), since anyone on the path would read it.
options:
  _terms:
    description: The repository, C(owner/name).
    required: true
    type: list
    elements: str
  revision:
    description: A branch, a tag or a 40-character commit sha.
    type: str
    required: true
  endpoint:
    description: The Hub or the site mirror, such as C(https://huggingface.co).
    type: str
    required: true
  token:
    description: A Hugging Face token for gated and private repositories; empty for none.
    type: str
    default: ""
  token_over_http:
    description:
      - Send the token to an C(http://) O(endpoint) (a site mirror on a network you trust; the roles pass
        C(fleet_vllm_hf_token_over_http)). Without it a token with such an endpoint is refused before any request.
    type: bool
    default: false
  endpoint_variable:
    description: The variable O(endpoint) comes from, for error messages.
    type: str
    default: the endpoint
  files:
    description: Also list the commit's files.
    type: bool
    default: true
  resolve:
    description:
      - Ask which commit O(revision) points at. V(false) lists the files of O(revision) as it is named (one request
        less) and returns RV(_raw[].commit) only when O(revision) is a commit sha.
    type: bool
    default: true
  validate_certs:
    description: Check the endpoint's TLS certificate.
    type: bool
    default: true
  timeout:
    description: Seconds for each request.
    type: int
    default: 30
  contents:
    description:
      - Also fetch the content of the listed files whose path matches one of these globs (C(fnmatch), where C(*)
        crosses C(/)), from the same O(endpoint) (C(GET /REPO/resolve/COMMIT/PATH)), and check each against the
        digest the listing gives it (the git blob sha1 C(oid), or the sha256 C(lfs.oid) of an LFS file); a file that
        differs fails the lookup. Meant for the small files that say what code runs (C(*.py), C(config.json) and
        the other files with an C(auto_map)) - a file over 1 MiB fails the lookup.
      - Needs a commit sha, as O(revision) or resolved.
    type: list
    elements: str
    default: []
  hint:
    description: What to check, appended to an error message (the caller's variables, say).
    type: str
    default: Check the endpoint, the repository, the revision and, for a gated or private model, the token.
"""

EXAMPLES = r"""
- name: The commit main points at, and its files
  ansible.builtin.set_fact:
    revision: "{{ lookup('fleet.vllm.hub_revision', 'nvidia/Kimi-K2.5-NVFP4', revision='main',
                         endpoint='https://huggingface.co') }}"
  run_once: true
  delegate_to: localhost
# revision.commit: 40-hex sha; revision.files: the tree entries ({type, path, size, oid[, lfs]})
"""

RETURN = r"""
_raw:
  description: One dictionary per term.
  type: list
  elements: dict
  contains:
    commit:
      description: The commit sha the revision points at (V(null) with O(resolve=false) and a revision that is not a sha).
      type: str
    files:
      description:
        - The commit's tree entries as the Hub lists them (C(type), C(path), C(size), C(oid) - the git blob sha1 -
          and for LFS files C(lfs) with C(oid) - the sha256 - and C(size)); empty without O(files).
      type: list
      elements: dict
    contents:
      description:
        - With O(contents), each fetched file by path - C(sha256), the sha256 of its content, and C(text), its content
          decoded as UTF-8 (undecodable bytes replaced).
      type: dict
"""

import fnmatch
import hashlib
import json
import re

from ansible.errors import AnsibleLookupError
from ansible.module_utils.common.text.converters import to_native
from ansible.module_utils.six.moves.urllib.error import HTTPError, URLError
from ansible.module_utils.six.moves.urllib.parse import quote, urljoin, urlsplit
from ansible.module_utils.urls import open_url
from ansible.plugins.lookup import LookupBase

from ansible_collections.fleet.vllm.plugins.module_utils._credentials import DEFAULT_PORTS, mask_credentials, origin

COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
NEXT_RE = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')
MAX_PAGES = 1000
# What urllib follows by itself (http.client's redirect codes); the lookup follows them so that it
# decides, for each hop, whether the token goes along.
REDIRECTS = (301, 302, 303, 307, 308)
MAX_REDIRECTS = 10
# The most a file of O(contents) may weigh: code and configuration files, never shards.
MAX_CONTENT = 1 << 20


class LookupModule(LookupBase):

    def get(self, url, what, raw=False):
        """The JSON answer of ``url`` (its bytes with ``raw``) and its Link header, redirects followed here rather
        than by urllib: ansible's redirect handler keeps every header, the token's too, whatever host a Location
        names."""
        for dummy in range(MAX_REDIRECTS + 1):
            headers = {} if raw else {"Accept": "application/json"}
            token = self.get_option("token")
            if token and origin(url) == self.origin:
                headers["Authorization"] = "Bearer " + token
            try:
                response = open_url(url, headers=headers, validate_certs=self.get_option("validate_certs"),
                                    timeout=self.get_option("timeout"), follow_redirects="none")
                body = response.read(MAX_CONTENT + 1) if raw else response.read()
                link = response.headers.get("Link") or ""
            except HTTPError as exc:
                location = exc.headers.get("Location") if exc.code in REDIRECTS and exc.headers else None
                if not location:
                    raise AnsibleLookupError(self.problem(what, url, "HTTP %d %s" % (exc.code, exc.reason)))
                target = urljoin(url, location)
                if urlsplit(target).scheme.lower() not in DEFAULT_PORTS:
                    raise AnsibleLookupError(self.problem(what, url, "redirected to %s, which is not an http(s) URL"
                                                          % target))
                url = target
                continue
            except (URLError, OSError, ValueError) as exc:
                raise AnsibleLookupError(self.problem(what, url, to_native(getattr(exc, "reason", exc))))
            if raw:
                if len(body) > MAX_CONTENT:
                    raise AnsibleLookupError(self.problem(what, url, "the file is over %d bytes" % MAX_CONTENT))
                return body, link
            try:
                return json.loads(body.decode("utf-8")), link
            except ValueError:
                raise AnsibleLookupError(self.problem(what, url, "the answer is not JSON"))
        raise AnsibleLookupError(self.problem(what, url, "more than %d redirects" % MAX_REDIRECTS))

    def problem(self, what, url, why):
        # An endpoint may carry credentials (https://user:password@mirror): they never reach a message.
        return mask_credentials("Cannot %s from %s (GET %s): %s. %s" % (what, self.get_option("endpoint"), url, why,
                                                                        self.get_option("hint")))

    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        revision = self.get_option("revision")
        endpoint = (self.get_option("endpoint") or "").rstrip("/")
        if not re.match(r"^https?://[^/\s]+", endpoint):
            raise AnsibleLookupError("hub_revision: endpoint %r is not an http(s) URL" % (mask_credentials(endpoint),))
        # The roles refuse this too, before anything changes (fleet_vllm_hf_token_over_http); here it holds for
        # every caller, and before any request.
        if self.get_option("token") and endpoint.lower().startswith("http://") and not self.get_option("token_over_http"):
            raise AnsibleLookupError(
                "hub_revision: a token is set and %s (%s) is plain http: the token would cross the network readable by "
                "anyone on the path; use an https endpoint, or, for a site mirror on a network you trust, set "
                "fleet_vllm_hf_token_over_http: true" % (self.get_option("endpoint_variable"), mask_credentials(endpoint)))
        self.origin = origin(endpoint)
        if not revision or re.search(r"\s", revision):
            raise AnsibleLookupError("hub_revision: revision %r is empty or has blanks" % (revision,))
        results = []
        for repo in terms:
            if not REPO_RE.match(repo or ""):
                raise AnsibleLookupError("hub_revision: %r is not a repository name owner/name" % (repo,))
            base = "%s/api/models/%s" % (endpoint, repo)
            commit = revision if COMMIT_RE.match(revision) else None
            if self.get_option("resolve"):
                url = "%s/revision/%s" % (base, quote(revision, safe=""))
                info, dummy = self.get(url, "resolve %s at revision %s" % (repo, revision))
                commit = info.get("sha") if isinstance(info, dict) else None
                if not isinstance(commit, str) or not COMMIT_RE.match(commit):
                    raise AnsibleLookupError(self.problem("resolve %s at revision %s" % (repo, revision), url,
                                                          "the answer has no commit sha"))
            files = []
            if self.get_option("files"):
                listed = commit or revision
                what = "list the files of %s at revision %s" % (repo, listed)
                url = "%s/tree/%s?recursive=true" % (base, quote(listed, safe=""))
                for dummy in range(MAX_PAGES):
                    page, link = self.get(url, what)
                    if not isinstance(page, list):
                        raise AnsibleLookupError(self.problem(what, url, "the answer is not a JSON list of files"))
                    files.extend(page)
                    found = NEXT_RE.search(link)
                    if not found:
                        break
                    url = found.group(1)
                else:
                    raise AnsibleLookupError("hub_revision: the listing of %s at %s has more than %d pages"
                                             % (repo, listed, MAX_PAGES))
            result = dict(commit=commit, files=files)
            if self.get_option("contents"):
                result["contents"] = self.contents(repo, commit, files)
            results.append(result)
        return results

    def contents(self, repo, commit, files):
        """{path: {sha256, text}} of the listed files O(contents) names, each checked against its listed digest."""
        if not commit:
            raise AnsibleLookupError("hub_revision: contents needs a commit sha, and %s is not one"
                                     % (self.get_option("revision"),))
        patterns = self.get_option("contents")
        found = {}
        for entry in files:
            path = entry.get("path") if isinstance(entry, dict) and entry.get("type") == "file" else None
            if not isinstance(path, str) or not any(fnmatch.fnmatchcase(path, pattern) for pattern in patterns):
                continue
            what = "fetch %s of %s at %s" % (path, repo, commit)
            url = "%s/%s/resolve/%s/%s" % (self.get_option("endpoint").rstrip("/"), repo, commit, quote(path))
            body, dummy = self.get(url, what, raw=True)
            lfs = entry.get("lfs") if isinstance(entry.get("lfs"), dict) else {}
            sha256 = hashlib.sha256(body).hexdigest()
            if lfs.get("oid"):
                listed, served = str(lfs["oid"]).rsplit(":", maxsplit=1)[-1], sha256
            else:
                listed = str(entry.get("oid"))
                served = hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()  # git's blob id, as the listing gives it
            if served != listed:
                raise AnsibleLookupError(self.problem(what, url, "its content (digest %s) is not the one the listing gives "
                                                                 "(%s): the endpoint answers two different files for one "
                                                                 "commit" % (served, listed)))
            found[path] = dict(sha256=sha256, text=body.decode("utf-8", "replace"))
        return found
