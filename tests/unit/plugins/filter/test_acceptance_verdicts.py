"""The acceptance run's verdicts (plugins/module_utils/_acceptance.py through the filter
fleet.vllm.acceptance_verdicts): who fails, why, and what is never compared."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.fleet.vllm.plugins.filter.acceptance import (
    acceptance_canary, acceptance_profile_errors, acceptance_verdicts,
)
from ansible_collections.fleet.vllm.plugins.module_utils._acceptance import (
    client_argv, identity_key, metrics_from_result, profile_label,
)

PROFILE = {"input_tokens": 64, "output_tokens": 32, "requests": 24, "concurrency": 4, "warmup_requests": 4, "seed": 0}
IDENTITY = {"vllm_version": "vllm 0.33.0", "model": "kimi-k2.5", "model_revision": "3f2a9c0d1e2b-abc", "kv_cache_dtype": "auto",
            "tensor_parallel_size": "8", "pipeline_parallel_size": "1", "platform": "cuda",
            "gpus": "8 x NVIDIA RTX PRO 6000 Blackwell Server Edition", "profile": profile_label(PROFILE)}


def measured(speed, failed=0, identity=None, last=None, hardware=None, errors=None):
    identity = dict(IDENTITY, **(identity or {}))
    return {"status": "measured", "reason": None, "identity": identity, "key": identity_key(identity),
            "metrics": {"output_tokens_per_s": speed, "requests_per_s": 1.0, "ttft_p50_ms": 10.0, "ttft_p99_ms": 20.0,
                        "itl_p50_ms": 5.0, "itl_p99_ms": 9.0, "completed": 24 - failed, "failed": failed,
                        "duration_s": 3.0},
            "errors": errors or [], "hardware": hardware or {"failures": [], "notes": []}, "last_accepted": last}


def test_a_healthy_fleet_is_accepted_and_the_table_has_a_line_per_host():
    results = {"gpu-%d" % i: measured(500.0 + i) for i in range(4)}
    out = acceptance_verdicts(results, 15)
    assert {h: v["verdict"] for h, v in out["verdicts"].items()} == dict.fromkeys(results, "accepted")
    assert out["verdicts"]["gpu-0"]["fleet_median"] == 501.5 and out["verdicts"]["gpu-0"]["fleet_peers"] == 4
    assert out["table"][0].split()[:3] == ["host", "verdict", "out"]
    expected = [["gpu-%d" % i, "accepted", "%.1f" % (500.0 + i)] for i in range(4)]
    assert [line.split()[:3] for line in out["table"][1:]] == expected


def test_a_slow_host_is_named_and_only_it():
    results = {"gpu-1": measured(500.0), "gpu-2": measured(510.0), "gpu-3": measured(150.0), "gpu-4": measured(495.0)}
    out = acceptance_verdicts(results, 15)["verdicts"]
    assert [h for h, v in out.items() if v["verdict"] != "accepted"] == ["gpu-3"]
    (reason,) = out["gpu-3"]["reasons"]
    assert reason.startswith("150.0 output tokens/s is 69.8% below the median of the 4 hosts measured with the same pin")
    assert "(497.5 tokens/s; tolerance 15.0%)" in reason


def test_within_the_tolerance_is_accepted_past_it_is_not():
    out = acceptance_verdicts({"a": measured(100.0), "b": measured(100.0), "c": measured(85.1)}, 15)["verdicts"]
    assert out["c"]["verdict"] == "accepted"
    out = acceptance_verdicts({"a": measured(100.0), "b": measured(100.0), "c": measured(84.9)}, 15)["verdicts"]
    assert out["c"]["verdict"] == "failed"


def test_a_host_slower_than_its_own_last_accepted_result_fails_even_alone():
    last = {"output_tokens_per_s": 600.0, "measured_at_text": "2026-12-01T10:00:00Z"}
    out = acceptance_verdicts({"solo": measured(400.0, last=last)}, 15)["verdicts"]["solo"]
    assert out["verdict"] == "failed" and out["fleet_median"] is None
    assert out["reasons"] == ["400.0 output tokens/s is 33.3% below its own last accepted result with the same pin, model,"
                              " hardware and profile (600.0 tokens/s, 2026-12-01T10:00:00Z; tolerance 15.0%)"]
    alone = acceptance_verdicts({"solo": measured(400.0)}, 15)["verdicts"]["solo"]
    assert alone["verdict"] == "accepted" and "becomes its reference" in alone["notes"][0]


@pytest.mark.parametrize("field, other", [("vllm_version", "vllm 0.34.0"), ("model_revision", "9999"),
                                          ("gpus", "8 x NVIDIA B200"), ("profile", "other"), ("kv_cache_dtype", "fp8")])
def test_results_under_another_identity_are_never_compared(field, other):
    """A host on another pin (or model, GPUs, profile, KV dtype) is not held to the others' median: its result has
    another key, and its own history (looked up by that key on the host) is its only reference."""
    results = {"a": measured(500.0), "b": measured(505.0), "new": measured(200.0, identity={field: other})}
    out = acceptance_verdicts(results, 15)["verdicts"]
    assert out["new"]["verdict"] == "accepted" and out["new"]["fleet_peers"] == 1
    assert out["a"]["fleet_peers"] == 2 and out["a"]["fleet_median"] == 502.5


def test_failed_requests_and_hardware_fail_a_fast_host_with_each_reason():
    hardware = {"failures": [{"message": "GPU 5 (00000000:81:00.0) runs its PCIe link at Gen2 x16 under load"}],
                "notes": ["GPU 7 was not seen under load"]}
    results = {"a": measured(500.0, failed=2, errors=["HTTP 500 EngineCore encountered an issue"]),
               "b": measured(500.0, hardware=hardware)}
    out = acceptance_verdicts(results, 15)["verdicts"]
    assert out["a"]["reasons"] == ["2 of 24 requests failed (first error: HTTP 500 EngineCore encountered an issue)"]
    assert out["b"]["reasons"] == ["GPU 5 (00000000:81:00.0) runs its PCIe link at Gen2 x16 under load"]
    assert out["b"]["notes"] == ["GPU 7 was not seen under load"]


def test_a_host_not_measured_is_neither_slow_nor_accepted_and_does_not_move_the_median():
    results = {"a": measured(500.0), "b": measured(100.0), "c": measured(510.0),
               "d": {"status": "not_measured", "reason": "the front door refused the key (HTTP 401 on /v1/models)",
                     "metrics": None, "identity": IDENTITY, "key": identity_key(IDENTITY)}}
    out = acceptance_verdicts(results, 15)
    assert out["verdicts"]["d"]["verdict"] == "not_measured"
    assert out["verdicts"]["d"]["reasons"] == ["not measured: the front door refused the key (HTTP 401 on /v1/models)"]
    assert out["verdicts"]["a"]["fleet_median"] == 500.0 and out["verdicts"]["b"]["verdict"] == "failed"
    assert out["table"][4].split()[:3] == ["d", "not_measured", "-"]


@pytest.mark.parametrize("tolerance", ["fast", None, [1]])
def test_a_tolerance_that_is_no_number_is_refused_naming_it(tolerance):
    with pytest.raises(AnsibleFilterError, match="vllm_acceptance_tolerance"):
        acceptance_verdicts({}, tolerance)


@pytest.mark.parametrize("profile, message", [
    ("fast", "vllm_acceptance_profile is \"fast\": set a mapping of input_tokens"),
    (dict(PROFILE, requests=0), "vllm_acceptance_profile.requests is 0: set a whole number from 1 to 100000"),
    (dict(PROFILE, concurrency="4"), "vllm_acceptance_profile.concurrency is \"4\": set a whole number"),
    (dict(PROFILE, seed=True), "vllm_acceptance_profile.seed is true: set a whole number"),
    (dict(PROFILE, rate=2), "vllm_acceptance_profile.rate is not a setting of the profile"),
    ({k: v for k, v in PROFILE.items() if k != "warmup_requests"}, "vllm_acceptance_profile.warmup_requests is missing"),
    (dict(PROFILE, concurrency=30), "vllm_acceptance_profile.concurrency (30) is above its requests (24)"),
])
def test_a_bad_profile_is_refused_naming_the_setting(profile, message):
    errors = acceptance_profile_errors(profile)
    assert len(errors) == 1 and errors[0].startswith(message), errors
    assert acceptance_profile_errors(PROFILE) == []


def test_the_client_gets_no_key_and_every_profile_setting():
    argv = client_argv("/opt/vllm/current/bin/python", PROFILE, "http://127.0.0.1:8080", "kimi-k2.5", "/srv/m", "/tmp/x", "r.json")
    assert argv[:2] == ["/opt/vllm/current/bin/python", "-c"] and "from vllm.benchmarks.serve import" in argv[2]
    flags = dict(zip(argv[3::1], argv[4::1]))
    assert (flags["--random-input-len"], flags["--random-output-len"], flags["--num-prompts"], flags["--max-concurrency"],
            flags["--num-warmups"], flags["--seed"]) == ("64", "32", "24", "4", "4", "0")
    assert "--ignore-eos" in argv and not any("key" in a.lower() for a in argv[3:])


def test_the_clients_result_becomes_our_figures_and_a_missing_one_is_named():
    result = {"output_throughput": 512.5, "request_throughput": 2.0, "p50_ttft_ms": 10, "p99_ttft_ms": 30.5,
              "p50_itl_ms": 4, "p99_itl_ms": 8, "completed": 24, "failed": 0, "duration": 12.0, "errors": ["", ""]}
    metrics, errors = metrics_from_result(result)
    assert metrics["output_tokens_per_s"] == 512.5 and metrics["ttft_p99_ms"] == 30.5 and metrics["completed"] == 24
    assert errors == []
    with pytest.raises(ValueError, match="no number for p99_itl_ms"):
        metrics_from_result(dict(result, p99_itl_ms=None))


def reference(speed, pin="vllm 0.16.0"):
    return {"output_tokens_per_s": speed, "identity": dict(IDENTITY, vllm_version=pin), "measured_at_text": "2026-12-04T10:00:00Z"}


def test_a_canary_slower_than_before_fails_with_both_figures_and_both_pins():
    out = acceptance_canary(measured(300.0), reference(500.0), 25)
    assert out["verdict"] == "failed" and out["last_accepted"]["output_tokens_per_s"] == 500.0
    assert out["reasons"] == ["300.0 output tokens/s on the new state (vllm 0.33.0) is 40.0% below 500.0 tokens/s on the"
                              " state it ran before (vllm 0.16.0, 2026-12-04T10:00:00Z; tolerance 25.0%)"]


@pytest.mark.parametrize("speed", [500.0, 380.0, 900.0])
def test_an_equal_or_faster_canary_passes(speed):
    out = acceptance_canary(measured(speed), reference(500.0), 25)
    assert out["verdict"] == "accepted" and out["reasons"] == []
    assert out["notes"] == ["%.1f output tokens/s on the new state, 500.0 before: within the tolerance of 25.0%%" % speed]


def test_a_canary_that_is_fast_but_fails_requests_or_cannot_be_measured_stops_the_roll():
    out = acceptance_canary(measured(600.0, failed=3, errors=["HTTP 500"]), reference(500.0), 25)
    assert out["verdict"] == "failed" and out["reasons"] == ["3 of 24 requests failed on the new state (first error: HTTP 500)"]
    gone = acceptance_canary({"status": "not_measured", "reason": "the front door did not answer /v1/models: refused"},
                             reference(500.0), 25)
    assert gone["verdict"] == "not_measured"
    assert gone["reasons"] == ["not measured on the new state: the front door did not answer /v1/models: refused"]


@pytest.mark.parametrize("ref", [{}, {"output_tokens_per_s": None}, None])
def test_a_canary_without_a_reference_figure_is_refused(ref):
    with pytest.raises(AnsibleFilterError, match="reference with output_tokens_per_s"):
        acceptance_canary(measured(500.0), ref, 25)
