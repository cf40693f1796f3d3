# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""TEST FIXTURE, NOT vLLM: the KV-cache dtypes vLLM's ``CacheConfig`` accepts, for the simulator.

Imitates ``vllm/config/cache.py`` of the real builds: ``CacheDType`` (a Literal), its mutable
mirror ``KV_CACHE_DTYPES`` and ``is_known_kv_cache_dtype`` (0.33.0; there plugins can register
more, here they cannot). The lists are those of the real 0.16.0 and 0.33.0 wheels
(``typing.get_args(CacheDType)``); a simulated version before 0.33 gets 0.16.0's.
tests/unit/simulator/test_simulator.py compares them with the real venvs. The simulator refuses
any other ``--kv-cache-dtype`` at engine start with vLLM's message, as CacheConfig does.
"""

import re
from typing import Literal

from vllm import __version__

DTYPES_0_16_0 = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla")
DTYPES_0_33_0 = (
    "auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "nvfp4_ds_mla",
    "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "octave_k3v4",
    "octave_k3v3", "octave_k3v3_compact", "ultraquant_4bit", "int4_per_token_head", "int8_per_token_head",
    "fp8_per_token_head", "nvfp4", "nvfp4_4over6",
)


def _release(version):
    match = re.match(r"^([0-9]+)\.([0-9]+)", version or "")
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


KV_CACHE_DTYPES = list(DTYPES_0_33_0 if _release(__version__) >= (0, 33) else DTYPES_0_16_0)
CacheDType = Literal[tuple(KV_CACHE_DTYPES)]  # noqa: F821 - built from the list, as vLLM's mirror is


def is_known_kv_cache_dtype(cache_dtype):
    return cache_dtype in KV_CACHE_DTYPES


def validate_cache_dtype(cache_dtype):
    """CacheConfig._validate_cache_dtype's check and message (vLLM 0.33.0)."""
    if not is_known_kv_cache_dtype(cache_dtype):
        raise ValueError("Invalid kv_cache_dtype: %r. Valid values are: %s" % (cache_dtype, KV_CACHE_DTYPES))
    return cache_dtype
