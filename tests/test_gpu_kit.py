"""The GPU proof kit (``python -m benchmarks.gpu``, ``make gpu-check``) on the CPU, as CI runs
it: the full report at small sizes, correctness comparisons that compare values (a wrong
model fails them), the kernel paths it names, and stage budgets that really cut a stage."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from benchmarks.gpu import __main__ as kit  # noqa: E402
from benchmarks.gpu import correctness, kernels, models, stages  # noqa: E402
from taxcompile import pipeline  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
STAGES = ["correctness", "kernels", "kernels_flex", "speed_encoder", "speed_compile", "speed_mha", "speed_positions",
          "speed_alignments", "speed_gat", "speed_generate", "speed_core"]
SPEED_CASES = {"encoder_vs_nn", "encoder_vs_nn_compiled", "encoder_vs_xtransformers",
               "encoder_vs_xtransformers_compiled", "mha_train", "position_alibi",
               "position_relative", "position_rotary", "local_vs_local_attention",
               "sparsemax_vs_entmax", "entmax_vs_entmax", "gat_vs_gatconv",
               "generate_kv_cache", "core_vs_gemm"}



def run_kit(*args, timeout=300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "benchmarks.gpu", "--device", "cpu", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-check")
    start = time.perf_counter()
    p = run_kit("--out", str(out))
    seconds = time.perf_counter() - start
    return p, json.loads((out / "gpu-report.json").read_text()), \
        (out / "gpu-report.md").read_text(), seconds


def test_make_target_runs_the_kit():
    # Under `make test` (CI) the outer make's MAKEFLAGS/MAKELEVEL reach this one, which then
    # prints "Entering/Leaving directory" lines: run it as a top-level make.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    p = subprocess.run(["make", "--no-print-directory", "-n", "gpu-check", "DEVICE=cpu"],
                       cwd=ROOT, capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1].endswith("python -m benchmarks.gpu --device cpu")


def test_cpu_run_writes_the_full_report(full_run):
    p, rep, md, seconds = full_run
    assert p.stdout.startswith("packages: pip install -e '.[bench]'"), p.stdout[:200]
    assert [s["stage"] for s in rep["stages"]] == STAGES
    assert all(s["status"] == "ok" for s in rep["stages"]), \
        [(s["stage"], s.get("error")) for s in rep["stages"]]
    assert rep["device"] == "cpu" and rep["small"] and rep["environment"]["torch"]
    # every model of specs/ and examples/, once
    rows = rep["stages"][0]["rows"]
    n = sum(len(pipeline.load(p).models) for d in models.SPEC_DIRS
            for p in (ROOT / d).glob("*.attn"))
    assert len(rows) == n >= 50 and len({r["model"] for r in rows}) == n
    speed = {r["case"]: r for s in rep["stages"][3:] for r in s["rows"]}
    assert set(speed) == SPEED_CASES
    for case, r in speed.items():  # timed with both peaks, or skipped with its reason
        assert r.get("skipped") or (r["candidate_s"] > 0 and r["baseline_s"] > 0 and
                                    r["candidate_peak_bytes"] is not None), case
        if r["ratio"] is not None and case != "core_vs_gemm":
            assert "agree" in r["equivalence"] or r["equivalence"] == "the same tokens", case
    assert speed["core_vs_gemm"]["candidate_tflops"] > 0 < speed["core_vs_gemm"]["baseline_tflops"]
    kern = {r["model"]: r for r in rep["stages"][1]["rows"]}
    assert set(kern) == {r["model"] for r in rows}
    assert all(r["statements"] and all(st["paths"] for st in r["statements"]) for r in kern.values())
    assert kern["vaswani2017_transformer"]["statements"][0]["paths"] == ["SDPA flash"]
    flex = {r["model"] for r in rep["stages"][2]["rows"]}  # the CPU never takes FlexAttention
    assert {"press2022_alibi", "yang2018_encoder"} <= flex
    for section in ("## Correctness", "## Kernels", "## FlexAttention", "## Speed and peak memory"):
        assert section in md
    assert rep["ok"] and p.returncode == 0, p.stdout[-2000:]


def test_correctness_compared_values(full_run):
    _, rep, _, _ = full_run
    rows = rep["stages"][0]["rows"]
    features = {f for r in rows for f in r["features"]}
    assert {"mask", "position", "sparse", "graph", "generate"} <= features
    for r in rows:
        f32 = r["modes"]["float32"]
        assert not f32["failed"], (r["model"], f32["failed"])
        assert f32["output"]["tensors"] >= 1 and f32["grad"]["tensors"] >= 1, r["model"]
        assert f32["output"]["elements"] > 0 and 0 <= f32["grad"]["worst"] <= 2e-3
        if "generate" in r["features"]:
            assert r["generate"]["same"] and r["generate"]["tokens"][0] == 2, r["model"]
    assert not [r["model"] for r in rows if not r["ok"]]  # no failure is accepted
    # bf16 compared everywhere, but where torch itself lacks the kernel (the start-up probe)
    probe = rep["recurrent_probe"]
    assert probe == correctness.probe_recurrent("cpu")
    skipped = {r["model"]: r["modes"]["bf16-autocast"]["skipped"] for r in rows
               if r["modes"]["bf16-autocast"].get("skipped")}
    assert ("vinyals2015_ptr_net" in skipped) == ("LSTM" in probe)  # its nn.LSTM, fed float32
    for model, why in skipped.items():
        assert why.startswith("torch on this CPU has no bf16 autocast kernel for nn.")
        assert f"(probe: {probe['LSTM' if 'nn.LSTM' in why else 'GRU']})" in why, model
    for r in rows:
        if r["model"] not in skipped:
            assert r["modes"]["bf16-autocast"]["grad"]["tensors"] >= 1, r["model"]


def test_only_the_probes_own_error_in_a_recurrent_model_is_skipped():
    probe = {"LSTM": "RuntimeError: no bf16 LSTM here"}
    lstm = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LSTM(4, 4))
    why = correctness.torch_limit(lstm, probe["LSTM"], probe)
    assert why == ("torch on this CPU has no bf16 autocast kernel for nn.LSTM "
                   "(probe: RuntimeError: no bf16 LSTM here)")
    assert correctness.torch_limit(lstm, "RuntimeError: another error", probe) is None
    assert correctness.torch_limit(torch.nn.Linear(3, 4), probe["LSTM"], probe) is None
    assert correctness.torch_limit(lstm, probe["LSTM"], {}) is None
    assert correctness.probe_recurrent("cuda") == {}  # CUDA: nothing probed, nothing skipped
    # the pointer network's bf16 run on this CPU: skipped only with the probe's own error
    entry = models.entries([str(ROOT / "examples" / "pointer_network.attn")])[0]
    real = correctness.probe_recurrent("cpu")
    for given in (real, {}, {"LSTM": "RuntimeError: another error"}):
        row = correctness.check_model(entry, "cpu", given)
        bf16 = row["modes"]["bf16-autocast"]
        assert row["ok"] == (bool(bf16.get("skipped")) or "output" in bf16), given
        assert bool(bf16.get("skipped")) == ("LSTM" in real and given == real), given


OUT = "        return Output(y, attn)"
WRONG = {  # the generated model, then wrong in float32 only (the reference runs in float64)
    "wrong_output": "        if x.dtype == torch.float32:\n            y = y * 1.001\n",
    "wrong_grad": "        if x.dtype == torch.float32:  # the same value, gradients x 1.01\n"
                  "            y = y + 0.01 * (y - y.detach())\n",
}


def wrong_models(tmp_path) -> list[Path]:
    """zhang2019_sagan's generated module as it is, and twice made wrong in float32."""
    text = (ROOT / "generated" / "zhang2019_sagan.py").read_text(encoding="utf-8")
    assert text.count(OUT) == 1
    paths = [tmp_path / "sagan.py"]
    paths[0].write_text(text, encoding="utf-8")
    for name, wrong in WRONG.items():
        path = tmp_path / f"{name}.py"
        path.write_text(text.replace(OUT, wrong + OUT), encoding="utf-8")
        paths.append(path)
    return paths


def test_a_wrong_model_fails_the_correctness_stage(tmp_path):
    paths = wrong_models(tmp_path)
    args = [a for p in paths for a in ("--models", str(p))]
    p = run_kit("--only", "correctness", "--out", str(tmp_path), *args)
    assert p.returncode == 1, p.stdout + p.stderr
    rep = json.loads((tmp_path / "gpu-report.json").read_text())
    rows = {r["model"]: r for r in rep["stages"][0]["rows"]}
    assert rows["sagan"]["ok"], rows["sagan"]
    out = rows["wrong_output"]["modes"]["float32"]
    assert any(f.startswith("out:output: error 1.0") for f in out["failed"]), out["failed"]
    grad = rows["wrong_grad"]["modes"]["float32"]
    assert not any(f.startswith("out:") for f in grad["failed"]), grad["failed"]
    assert any(f.startswith("grad:") for f in grad["failed"]), grad["failed"]
    assert "**no**" in (tmp_path / "gpu-report.md").read_text()


def sleeper(ctx) -> None:
    ctx.emit({"step": 1})
    time.sleep(120)
    ctx.emit({"step": 2})


def test_a_stage_past_its_budget_is_cut(tmp_path):
    start = time.perf_counter()
    r = stages.run_stage("sleepy", sleeper, 2.0, "cpu", True, tmp_path)
    assert time.perf_counter() - start < 20
    assert r["status"] == "cut" and "cut at its budget of 2 s" in r["error"]
    assert r["rows"] == [{"step": 1}]  # what it finished before the cut is kept
    with pytest.raises(ProcessLookupError):  # the child is gone, not left running
        os.kill(r["pid"], 0)


def test_a_budget_from_the_command_line_cuts_the_stage(tmp_path):
    code = kit.main(["--device", "cpu", "--only", "correctness", "--out", str(tmp_path),
                     "--models", str(ROOT / "specs" / "vaswani2017.attn"),
                     "--budget", "correctness=0.01"])
    rep = json.loads((tmp_path / "gpu-report.json").read_text())
    assert code == 1 and not rep["ok"]
    assert rep["stages"][0]["status"] == "cut" and rep["stages"][0]["budget_s"] == 0.01


def test_cuda_budgets_leave_a_margin_under_eight_minutes():
    # with some 5 s to start each stage's process
    assert sum(cuda + 5 for _, cuda, _ in kit.stages().values()) <= 450


def test_kernels_name_the_backend_the_dispatcher_takes():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    entry = models.entries([str(ROOT / "specs" / "vaswani2017.attn")])[0]
    row = kernels.kernels_of(entry, "cpu")
    names = {s["statement"]: s for s in row["statements"]}
    assert set(names) == {"encoder.*.self_attn", "decoder.*.self_attn", "decoder.*.cross"}
    assert all(s["calls"] >= 1 and s["paths"] == ["SDPA flash"] for s in names.values())
    with sdpa_kernel([SDPBackend.MATH]):  # the math backend forced: the kit must see it
        forced = kernels.kernels_of(entry, "cpu")
    assert all(s["paths"] == ["SDPA math"] and s["ok"] for s in forced["statements"])
    math_call = [{"path": "SDPA math"}]
    assert kernels.statement_ok(math_call, "cpu") and not kernels.statement_ok(math_call, "cuda")
    bahdanau = models.entries([str(ROOT / "specs" / "bahdanau2015.attn")])[0]
    assert [s["paths"] for s in kernels.kernels_of(bahdanau, "cpu")["statements"]] == [["eager"]]


def test_comparison_is_relative_l2_error():
    ref = {"out:y": torch.tensor([3.0, 4.0], dtype=torch.float64),
           "grad:w": torch.tensor([1.0, 0.0], dtype=torch.float64)}
    got = {"out:y": torch.tensor([3.0, 4.5], dtype=torch.float64),
           "grad:w": torch.tensor([1.0, 0.0], dtype=torch.float64)}
    res = correctness.compare(got, ref, {"output": 0.05, "grad": 0.1})
    assert res["output"]["worst"] == pytest.approx(0.1)  # 0.5 / 5
    assert res["failed"] == ["out:y: error 1.00e-01 > 0.05"]
    assert res["grad"]["tensors"] == 1 and res["grad"]["worst"] == 0.0


def test_docs_state_the_budgets_the_kit_uses():
    text = (ROOT / "docs" / "gpu.md").read_text(encoding="utf-8")
    documented = {m.group(1): float(m.group(2))
                  for m in re.finditer(r"^\| `(\w+)` \|.*\| (\d+) s \|$", text, re.M)}
    assert documented == {n: cuda for n, (_, cuda, _) in kit.stages().items()}
    assert f"The budgets sum to {sum(documented.values()):.0f} s" in text


def test_a_speed_row_whose_sides_differ_is_not_timed():
    from benchmarks.cases import CPU
    from benchmarks.gpu import speed
    from benchmarks.peers import Pair

    x = torch.randn(4, 8, requires_grad=True)
    g = torch.randn(4, 8)

    def make(scale):
        return lambda s: Pair(lambda: x * 2.0, lambda: x * scale, [x], g)
    same = speed.compare_here("same", "ours", "peer", CPU, make(2.0), "")
    assert same["ratio"] > 0 and "relative L2 error 0.0e+00" in same["equivalence"]
    wrong = speed.compare_here("wrong", "ours", "peer", CPU, make(2.02), "")
    assert wrong["ratio"] is None and wrong["met"] is False
    assert "**differ** in float32: relative L2 error 9.9e-03 > 0.0001" == wrong["equivalence"]


def test_flex_calls_are_counted_under_torch_compile(monkeypatch):
    """On the CPU the generated code never takes FlexAttention (flex_ready wants CUDA); with
    flex_ready forced, dynamo's eager backend runs the same Python the CUDA run compiles."""
    entry = models.entries([str(ROOT / "examples" / "alibi.attn")])[0]
    mod = entry.module
    cfg = mod.Config.tiny()
    model, ex = mod.Model(cfg).eval(), mod.example_inputs(cfg=cfg)
    assert kernels.count_flex(mod, model, ex, backend="eager") == 0
    monkeypatch.setattr(mod, "flex_ready", lambda q: torch.compiler.is_compiling())
    assert kernels.count_flex(mod, model, ex, backend="eager") == cfg.layers


@pytest.mark.parametrize("args,message", [
    (["--budget", "nosuch=3"], "--budget nosuch=3: no stage `nosuch` (stages: correctness, "),
    (["--budget", "kernels=soon"], "--budget kernels=soon: expected STAGE=SECONDS, a positive"),
    (["--budget", "kernels=0"], "--budget kernels=0: expected STAGE=SECONDS, a positive"),
    (["--models", "no/such.attn"], "--models no/such.attn: no such file or folder"),
])
def test_bad_arguments_are_one_line_and_exit_2(tmp_path, capsys, args, message):
    assert kit.main(["--device", "cpu", "--out", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"python -m benchmarks.gpu: error: {message}") and err.count("\n") == 1
    assert not (tmp_path / "gpu-report.json").exists()


def test_a_spec_with_an_error_is_reported_located(tmp_path, capsys):
    bad = tmp_path / "bad.attn"
    bad.write_text("paper p {\n  cite = \"x\"\n}\nmodel m {\n  input x: sequence[L, d]\n"
                   "  output y = identity(nothere)\n}\n", encoding="utf-8")
    assert kit.main(["--device", "cpu", "--out", str(tmp_path), "--models", str(bad)]) == 2
    err = capsys.readouterr().err
    assert re.search(r"bad\.attn:\d+:\d+: error: ", err), err
    assert "Traceback" not in err and not (tmp_path / "gpu-report.json").exists()
