"""`taxcompile train SPEC --out CKPT`: the synthetic task or the user's batches (a .pt list
or a module:function), a checkpoint that a second run resumes, and one-line errors."""

import os
import re
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from taxcompile.cli import main  # noqa: E402
from taxcompile.fitting import load_checkpoint  # noqa: E402

from conftest import ROOT, SPECS  # noqa: E402

LIN = str(SPECS / "lin2017.attn")


def _keyword_batches(n, size=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        sent = torch.randint(4, 50, (size, 10), generator=g)
        label = torch.randint(0, 2, (size,), generator=g)
        sent[label == 1, 3] = 3
        out.append(({"sent": sent}, label))
    return out


def test_train_runs_the_synthetic_task_and_a_second_run_resumes(tmp_path, capsys):
    ckpt = tmp_path / "lin.pt"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "taxcompile", "train", LIN, "--steps", "60", "--out", str(ckpt)]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""  # no progress bar: stderr is not a terminal
    m = re.fullmatch(r"trained `self_attentive` on its synthetic task \(find which of 4 keywords "
                     r"is planted in the input\): 60 steps, loss [\d.]+ -> [\d.]+; held-out loss "
                     r"[\d.]+, accuracy ([\d.]+); [\d.]+ steps/s, \d+ examples/s on 1 thread "
                     rf"\(from OMP_NUM_THREADS\); checkpoint {re.escape(str(ckpt))}\n", p.stdout)
    assert m, p.stdout
    state = load_checkpoint(ckpt)
    assert state["history"]["steps"] == 60 and state["meta"]["model"] == "self_attentive"
    assert state["meta"]["config"]["d_emb"] == 16  # Config.tiny()
    assert main(cmd[3:]) == 0  # again: it resumes, with nothing more to train
    out, err = capsys.readouterr()
    assert err == f"taxcompile: resuming from {ckpt} at step 60\n"
    assert "60 steps" in out and "steps/s" not in out


def test_train_on_a_file_of_batches_holds_some_out(tmp_path, capsys):
    data = tmp_path / "batches.pt"
    torch.save(_keyword_batches(20), data)
    ckpt = tmp_path / "out.pt"
    assert main(["train", LIN, "--data", str(data), "--steps", "80", "--lr", "1e-2",
                 "--set", "r=1", "--out", str(ckpt), "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert f"on {data}: 80 steps" in out and "on 1 thread (as asked)" in out
    acc = float(re.search(r"accuracy ([\d.]+)", out).group(1))
    assert acc >= 0.9  # on the 2 held-out batches, never trained on
    assert load_checkpoint(ckpt)["meta"]["config"]["r"] == 1


def test_train_on_a_function_of_the_config(tmp_path, capsys, monkeypatch):
    (tmp_path / "mydata.py").write_text(
        "import torch\n"
        "def batches(cfg):\n"
        "    g = torch.Generator().manual_seed(0)\n"
        "    x = torch.randint(0, cfg.vocab, (8, 5), generator=g)\n"
        "    return [({'sent': x}, x[:, 0] % cfg.classes)] * 3\n")
    monkeypatch.chdir(tmp_path)
    assert main(["train", LIN, "--data", "mydata:batches", "--eval-data", "mydata:batches",
                 "--steps", "3", "--out", "c.pt", "-q"]) == 0
    assert "on mydata:batches: 3 steps" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--steps", "0"], "argument --steps: must be at least 1, got 0"),
    (["--lr", "-1"], "argument --lr: must be above 0.0, got -1"),
    (["--data", "missing.pt"], "--data: no such file: missing.pt"),
    (["--data", "junk.pt"], "--data: junk.pt is not a file of tensors that torch.load reads "
     "with weights_only=True (UnpicklingError)"),
    (["--data", "dict.pt"], "--data: dict.pt holds a dict; expected a non-empty list of "
     "batches (inputs, target)"),
    (["--data", "wrong.pt"], "wrong.pt: batch 0: `words` is not an input of model "
     "`self_attentive` (its inputs: sent, sent_mask)"),
    (["--data", "flat.pt"], "batch 0: a dict; a batch is (inputs, target) or (inputs, target, "
     "mask), inputs a dict of forward()'s keyword arguments (the target beside the inputs, "
     "not among them)"),
    (["--data", "nosuchmodule:f"], "--data nosuchmodule:f: No module named 'nosuchmodule'"),
    (["--data", "x"], "--data 'x': expected FILE.pt or MODULE:FUNCTION"),
    (["--set", "d_emb=wide"], "--set d_emb: expected a whole number, got 'wide'"),
    (["--set", "dmodel=3"], "unknown Config field `dmodel`"),
    (["--model", "nope"], "no model `nope` in the spec; its models: self_attentive"),
    (["--eval-data", "x.pt"], "--eval-data needs --data (the synthetic task has its own)"),
    (["--out", "."], "--out . is a directory; name the checkpoint file"),
    (["--out", "other.pt"], "other.pt: the checkpoint is of another model (it has no "
     "`H_embed.weight`)"),
])
def test_bad_arguments_are_one_line_errors_and_write_nothing(args, message, tmp_path, capsys,
                                                             monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "junk.pt").write_bytes(b"not a pickle")
    torch.save({"a": 1}, tmp_path / "dict.pt")
    torch.save([({"words": torch.zeros(2, 3, dtype=torch.long)}, torch.zeros(2))],
               tmp_path / "wrong.pt")
    torch.save([{"sent": torch.zeros(2, 3, dtype=torch.long), "target": torch.zeros(2)}] * 2,
               tmp_path / "flat.pt")
    main(["train", str(SPECS / "vaswani2017.attn"), "--steps", "1", "--out", "other.pt", "-q"])
    capsys.readouterr()
    before = sorted(p.name for p in tmp_path.iterdir())
    argv = ["train", LIN, "--steps", "2", *args]
    if "--out" not in args:
        argv += ["--out", "c.pt"]
    with pytest.raises(SystemExit) as info:
        raise SystemExit(main(argv))
    assert info.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert message in lines[-1] and "Traceback" not in err
    assert len(lines) == 1 or lines[0].startswith("usage:")
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_bad_thread_count_in_the_environment_is_a_one_line_error(tmp_path, capsys,
                                                                    monkeypatch):
    monkeypatch.setenv("TORCH_NUM_THREADS", "many")
    assert main(["train", LIN, "--out", str(tmp_path / "c.pt")]) == 2
    assert capsys.readouterr().err == ("taxcompile: error: TORCH_NUM_THREADS: expected a "
                                       "positive whole number of threads, got 'many'\n")
