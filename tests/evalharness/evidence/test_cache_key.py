"""The dense arm's cache key: every input that changes the latents changes it, and nothing else
does; checkpoint identities by content; the code and environment it reads."""

import dataclasses
import json
import os
import shutil

import jax

import evalharness.evidence.cache_key as cache_module
from evalharness.config.schemas import (
    ComputeDType,
    DenseExecutor,
    DType,
    GuidancePasses,
    KernelBackend,
    LoggerKind,
    PermutePlacement,
    ProgressMode,
    SamplerName,
)
from evalharness.evidence.cache_key import (
    cache_key,
    code_files,
    code_version,
    dense_arm_fields,
    dense_arm_key,
    environment_fields,
)
from tests.helpers.cache_key import (
    IDENTITY,
    SHIFT,
    other_choice,
    pinned_key,
    replace_field,
)
from tests.helpers.paths import REPO_ROOT

# ----------------------------------------------------------------------------- code version


def _copy_code(tmp_path):
    root = tmp_path / "tree"
    for path in code_files():
        dst = root / path.relative_to(REPO_ROOT)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dst)
    return root


def test_code_files_cover_models_kernels_and_the_harness():
    names = {p.relative_to(REPO_ROOT).as_posix() for p in code_files()}
    for expected in (
        "evalharness/evidence/dense_cache.py",
        "evalharness/run.py",
        "evalharness/arms/arm.py",
        "evalharness/assembly/components.py",
        "models/transformer.py",
        "models/samplers.py",
    ):
        assert expected in names, expected
    assert any(n.startswith("kernels/") for n in names)
    assert not any("__pycache__" in n or not n.endswith(".py") for n in names)


def test_code_version_follows_every_edit_of_the_tree(tmp_path):
    root = _copy_code(tmp_path)
    base = code_version(root)
    assert base == code_version() and len(base) == 16  # content and relative paths only
    run_py = root / "evalharness" / "run.py"
    original = run_py.read_text()
    run_py.write_text(original + "\n# edited\n")
    assert code_version(root) != base  # the harness's own code counts
    run_py.write_text(original)
    assert code_version(root) == base
    kernel = next((root / "kernels").rglob("*.py"))
    kernel_text = kernel.read_text()
    kernel.write_text(kernel_text + "\n")
    assert code_version(root) != base
    kernel.write_text(kernel_text)
    os.utime(run_py, (0, 0))  # a touch (or a copy) is not an edit
    (root / "README.md").write_text("not code")
    assert code_version(root) == base
    added = root / "models" / "new_module.py"
    added.write_text("X = 1\n")
    with_added = code_version(root)
    assert with_added != base
    added.rename(root / "models" / "renamed_module.py")
    assert code_version(root) not in (base, with_added)
    (root / "models" / "renamed_module.py").unlink()
    assert code_version(root) == base


def test_default_key_uses_the_code_version(cfg, env, monkeypatch):
    base = dense_arm_key(cfg, IDENTITY, SHIFT, devices=1, step_callback=False, environment=env)
    assert dense_arm_fields(cfg, IDENTITY, SHIFT, environment=env)["code"] == code_version()
    monkeypatch.setattr(cache_module, "code_version", lambda root=None: "edited")
    assert (
        dense_arm_key(cfg, IDENTITY, SHIFT, devices=1, step_callback=False, environment=env) != base
    )


# ----------------------------------------------------------------------------- the key's inputs


def test_dense_arm_key_fields(cfg, env):
    # Renaming or reshaping a field invalidates every cached dense arm: change this list knowingly.
    fields = dense_arm_fields(cfg, IDENTITY, SHIFT)
    assert list(fields) == [
        "model",
        "checkpoint_revision",
        "param_dtype",
        "dtype",
        "resolution",
        "steps",
        "sampler",
        "flow_shift",
        "seed",
        "prompt",
        "negative_prompt",
        "guidance_scale",
        "guidance_passes",
        "kernel",
        "parallel",
        "noise_floor",
        "step_callback",
        "code",
        "environment",
    ]
    as_json = json.loads(json.dumps(fields, default=str))
    assert as_json["resolution"] == [33, 64, 64]
    assert as_json["kernel"] == {
        "backend": "xla",
        "block_q": 8,
        "block_kv": 8,
        "block_kv_compute": None,
        "vmem_limit_bytes": None,
        "num_warps": None,
        "num_stages": None,
        "dense_executor": "xla_flash",  # the CPU's dense control
        "noise_floor_executor": "dot_product_attention",
    }
    # parallel.sequence=0 is "all devices": the key holds the count actually used.
    assert cfg.parallel.sequence == 0
    assert as_json["parallel"] == {
        "devices": jax.device_count(),
        "permute_placement": "head_local",
    }
    assert (as_json["sampler"], as_json["dtype"], as_json["param_dtype"]) == (
        "unipc",
        "float32",
        "float32",
    )
    assert set(as_json["environment"]) == {
        "cpu",
        "machine",
        "platform",
        "device_kind",
        "runtime",
        "xla_flags",
        "libtpu_init_args",
        "matmul_precision",
        "x64",
        "jax",
        "jaxlib",
        "flax",
        "plugins",
    }
    assert as_json["environment"]["device_kind"] == jax.devices()[0].device_kind
    assert as_json["environment"]["jax"] == jax.__version__
    assert dense_arm_key(cfg, IDENTITY, SHIFT) == cache_key(fields)  # run.py's call
    assert dense_arm_key(cfg, "tiny|seed=1", SHIFT) != cache_key(fields)


def _config_flips(cfg):
    """(field, changed value) for every config field the dense arm depends on."""
    k = cfg.kernel
    return [
        ("model.param_dtype", other_choice(cfg.model.param_dtype, list(DType))),
        ("model.revision", "0123456789abcdef0123456789abcdef01234567"),  # a hub commit
        ("dtype", other_choice(cfg.dtype, [ComputeDType.float32, ComputeDType.bfloat16])),
        ("resolution.frames", cfg.resolution.frames + 4),
        ("resolution.height", cfg.resolution.height + 16),
        ("resolution.width", cfg.resolution.width + 16),
        ("steps", cfg.steps + 1),
        ("sampler", other_choice(cfg.sampler, list(SamplerName))),
        ("seed", cfg.seed + 1),
        ("prompt", cfg.prompt + "!"),
        ("negative_prompt", cfg.negative_prompt + "!"),
        ("guidance_scale", cfg.guidance_scale + 0.5),
        ("guidance_passes", other_choice(cfg.guidance_passes, list(GuidancePasses))),
        ("kernel.backend", other_choice(k.backend, list(KernelBackend))),
        ("kernel.block_q", 16),
        ("kernel.block_kv", 16),
        ("kernel.block_kv_compute", 4),
        ("kernel.vmem_limit_bytes", 1 << 20),
        ("kernel.num_warps", 4),
        ("kernel.num_stages", 2),
        ("kernel.dense_executor", other_choice(k.dense_executor, list(DenseExecutor))),
        ("kernel.noise_floor_executor", other_choice(k.noise_floor_executor, list(DenseExecutor))),
        (
            "parallel.permute_placement",
            other_choice(cfg.parallel.permute_placement, PermutePlacement),
        ),
        ("noise_floor", not cfg.noise_floor),
    ]


def test_every_input_of_the_key_changes_it(cfg, env):
    base = pinned_key(cfg, env)
    seen = {base}
    flips = [
        (f"cfg.{name}", pinned_key(replace_field(cfg, name, v), env))
        for name, v in _config_flips(cfg)
    ]
    flips += [
        ("identity", pinned_key(cfg, env, identity="tiny|seed=1")),
        ("shift", pinned_key(cfg, env, shift=SHIFT + 2.0)),
        ("devices", pinned_key(cfg, env, devices=2)),
        ("step_callback", pinned_key(cfg, env, step_callback=True)),
        ("code", pinned_key(cfg, env, code="code-v2")),
    ]
    assert env  # one flip per environment element
    for name, value in env.items():
        changed = {"x": 1} if isinstance(value, dict) else (not value if value is False else "z")
        flips.append((f"environment.{name}", pinned_key(cfg, {**env, name: changed})))
    for name, key in flips:
        assert key != base, f"{name} does not change the key"
        assert key not in seen, f"{name} collides with another flip"
        seen.add(key)


def test_fields_that_do_not_decide_the_dense_arm_leave_the_key(cfg, env):
    base = pinned_key(cfg, env)
    unchanged = [
        ("warm_runs", cfg.warm_runs + 2),  # timings are measured by every run
        ("logger.kind", other_choice(cfg.logger.kind, list(LoggerKind))),
        ("logger.tracking_uri", "sqlite:///elsewhere.db"),
        ("logger.experiment_name", "other"),
        ("logger.log_videos", not cfg.logger.log_videos),
        ("gate.min_psnr_db", 30.0),
        ("gate.min_speedup", 1.5),
        ("schedule", dataclasses.replace(cfg.schedule, density=cfg.schedule.density / 2)),
        ("schedule.name", "renamed"),
        ("max_minutes", cfg.max_minutes + 1),
        ("output_root", "/elsewhere/outputs"),
        ("cache_dir", "/elsewhere/cache"),
        ("compile_cache", False),  # a program taken from the cache is the executable compiled
        ("fps", cfg.fps + 8),
        ("crf", cfg.crf + 1),
        ("dry_run", not cfg.dry_run),
        ("target", "h200"),
        ("resolution.name", "renamed"),
        ("resolution.default_steps", cfg.resolution.default_steps + 1),
        ("resolution.flow_shift", 7.0),  # the shift actually used is its own input
        ("model.checkpoint", "/copied/elsewhere"),  # the content is in the identity
        ("progress", other_choice(cfg.progress, list(ProgressMode))),  # given: step_callback
        ("parallel.sequence", 1),  # given: the resolved device count
        ("parallel.distributed", True),  # given: the device count (one process or several)
        ("save_latents", True),  # a file written beside the results
    ]
    for name, value in unchanged:
        if name == "schedule.name":
            value = dataclasses.replace(cfg.schedule, name=value)
            name = "schedule"
        assert pinned_key(replace_field(cfg, name, value), env) == base, f"{name} changed the key"


def test_sequence_zero_resolves_to_the_devices_used(cfg, env, monkeypatch):
    one = jax.devices()[0]
    fields = dense_arm_fields(cfg, IDENTITY, SHIFT, environment=env, step_callback=False)
    assert fields["parallel"]["devices"] == jax.device_count() == 1
    explicit_one = replace_field(cfg, "parallel.sequence", 1)
    assert dense_arm_key(
        explicit_one, IDENTITY, SHIFT, environment=env, step_callback=False
    ) == dense_arm_key(cfg, IDENTITY, SHIFT, environment=env, step_callback=False)
    monkeypatch.setattr(jax, "devices", lambda *a: [one] * 4)
    four = dense_arm_fields(cfg, IDENTITY, SHIFT, environment=env, step_callback=False)
    assert four["parallel"]["devices"] == 4
    assert cache_key(four) != cache_key(fields)
    # sequence=1 on the same 4 devices uses one: the key of the one-device run.
    assert dense_arm_fields(explicit_one, IDENTITY, SHIFT, environment=env, step_callback=False)[
        "parallel"
    ] == {"devices": 1, "permute_placement": cfg.parallel.permute_placement}


def test_step_callback_defaults_to_none_in_the_loop(cfg):
    # No timed loop carries a host callback, whatever ``progress`` says; the flag stays in the
    # key so that a loop with one could never share an entry.
    env = environment_fields()
    for mode in ProgressMode:
        fields = dense_arm_fields(replace_field(cfg, "progress", mode), IDENTITY, SHIFT)
        assert fields["step_callback"] is False
    assert pinned_key(cfg, env, step_callback=True) != pinned_key(cfg, env)


def test_environment_fields_follow_the_environment(cfg, monkeypatch):
    base_env = environment_fields()
    base = dense_arm_key(cfg, IDENTITY, SHIFT, step_callback=False)
    assert base_env["xla_flags"] == " ".join(os.environ.get("XLA_FLAGS", "").split())

    def changes(**expect):
        env = environment_fields()
        for name, value in expect.items():
            assert env[name] == value, name
        assert dense_arm_key(cfg, IDENTITY, SHIFT, step_callback=False) != base
        monkeypatch.undo()
        assert dense_arm_key(cfg, IDENTITY, SHIFT, step_callback=False) == base

    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=true")
    changes(xla_flags="--xla_cpu_enable_fast_math=true")
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "--xla_tpu_enable_latency_hiding_scheduler=true")
    changes(libtpu_init_args="--xla_tpu_enable_latency_hiding_scheduler=true")
    monkeypatch.setattr(cache_module, "cpu_model", lambda: "Some Other CPU")
    changes(cpu="Some Other CPU")
    monkeypatch.setattr(jax, "__version__", "0.0.1")
    changes(jax="0.0.1")
    real_version = cache_module._version
    for dist in ("jaxlib", "flax"):
        monkeypatch.setattr(
            cache_module, "_version", lambda d, dist=dist: "9.9" if d == dist else real_version(d)
        )
        changes(**{dist: "9.9"})
    monkeypatch.setattr(
        cache_module,
        "_version",
        lambda d: "1.0" if d == "jax-cuda12-plugin" else real_version(d),
    )
    assert environment_fields()["plugins"]["jax-cuda12-plugin"] == "1.0"
    changes()
    with jax.default_matmul_precision("bfloat16"):
        assert environment_fields()["matmul_precision"] == "bfloat16"
        assert dense_arm_key(cfg, IDENTITY, SHIFT, step_callback=False) != base
    assert dense_arm_key(cfg, IDENTITY, SHIFT, step_callback=False) == base
