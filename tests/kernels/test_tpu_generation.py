"""The scoped VMEM limit the compiler's flag sets (``kernels.executors.tpu_generation``), read as a
command line reads a repeated flag: the later value wins. Launchers append a user's override to
a default (``LIBTPU_INIT_ARGS="$DEFAULTS --xla_tpu_scoped_vmem_limit_kib=N"``), so the first value
is the one the user meant to replace."""

from __future__ import annotations

import pytest

from kernels.executors.tpu_generation import describe_limit, flag_scoped_vmem, scoped_vmem_limit

FLAG = "--xla_tpu_scoped_vmem_limit_kib"
KIB = 1024


@pytest.fixture
def no_flags(monkeypatch):
    """Neither variable set: each test sets what it reads."""
    monkeypatch.delenv("LIBTPU_INIT_ARGS", raising=False)
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    return monkeypatch


@pytest.mark.parametrize("variable", ["LIBTPU_INIT_ARGS", "XLA_FLAGS"])
def test_a_repeated_flag_takes_its_last_value(no_flags, variable):
    # A default first, other flags between, the override last: the override is the limit.
    no_flags.setenv(variable, f"{FLAG}=16384 --xla_other=1 {FLAG}=49152")
    assert flag_scoped_vmem() == 49152 * KIB
    assert scoped_vmem_limit("v5e") == 48 << 20
    # And the other way round: the later, smaller value wins as well.
    no_flags.setenv(variable, f"{FLAG}=65536 {FLAG}=24576")
    assert scoped_vmem_limit("v6e") == 24 << 20


def test_xla_flags_alone_set_the_limit(no_flags):
    no_flags.setenv("XLA_FLAGS", f"--xla_dump_to=/tmp/x {FLAG}=40960")
    assert scoped_vmem_limit("v5e") == 40 << 20
    assert scoped_vmem_limit(None) == 40 << 20  # over the smallest default too
    assert describe_limit("v5e") == f"40 MiB, set by {FLAG}"


def test_libtpu_init_args_come_before_xla_flags(no_flags):
    no_flags.setenv("XLA_FLAGS", f"{FLAG}=40960")
    no_flags.setenv("LIBTPU_INIT_ARGS", f"{FLAG}=24576")
    assert scoped_vmem_limit("v5e") == 24 << 20
    # A LIBTPU_INIT_ARGS without the flag leaves XLA_FLAGS' value.
    no_flags.setenv("LIBTPU_INIT_ARGS", "--xla_enable_async_all_gather=true")
    assert scoped_vmem_limit("v5e") == 40 << 20


def test_without_the_flag_each_generation_keeps_its_default(no_flags):
    no_flags.setenv("LIBTPU_INIT_ARGS", "--xla_enable_async_all_gather=true")
    assert flag_scoped_vmem() is None
    assert (scoped_vmem_limit("v5e"), scoped_vmem_limit("v6e")) == (16 << 20, 32 << 20)
    assert describe_limit("v6e") == "32 MiB, v6e's default"
