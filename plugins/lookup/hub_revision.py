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
  - The token, when given, goes in an C(Authorization) header and never into a message.
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
"""

import json
import re

from ansible.errors import AnsibleLookupError
from ansible.module_utils.common.text.converters import to_native
from ansible.module_utils.six.moves.urllib.error import HTTPError, URLError
from ansible.module_utils.six.moves.urllib.parse import quote
from ansible.module_utils.urls import open_url
from ansible.plugins.lookup import LookupBase

from ansible_collections.fleet.vllm.plugins.module_utils._credentials import mask_credentials

COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
NEXT_RE = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')
MAX_PAGES = 1000


class LookupModule(LookupBase):

    def get(self, url, what):
        headers = {"Accept": "application/json"}
        token = self.get_option("token")
        if token:
            headers["Authorization"] = "Bearer " + token
        try:
            response = open_url(url, headers=headers, validate_certs=self.get_option("validate_certs"),
                                timeout=self.get_option("timeout"), follow_redirects="safe")
            body = response.read()
            link = response.headers.get("Link") or ""
        except HTTPError as exc:
            raise AnsibleLookupError(self.problem(what, url, "HTTP %d %s" % (exc.code, exc.reason)))
        except (URLError, OSError, ValueError) as exc:
            raise AnsibleLookupError(self.problem(what, url, to_native(getattr(exc, "reason", exc))))
        try:
            return json.loads(body.decode("utf-8")), link
        except ValueError:
            raise AnsibleLookupError(self.problem(what, url, "the answer is not JSON"))

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
            results.append(dict(commit=commit, files=files))
        return results
