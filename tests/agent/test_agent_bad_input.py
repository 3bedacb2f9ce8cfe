"""Bad input to tune / evaluate / combine / train: one line naming the file (and row, field), a
non-zero exit, no traceback and no output left behind; and output people can read (80 columns,
valid Markdown, rounded intervals, integer step ticks, flags shown as flags)."""

from __future__ import annotations

import json
import random
import re
import zipfile
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

import agent.loop.backends
from agent.cli import app
from agent.cli.evaluate import terminal_table
from agent.cli.tune import step_lines
from agent.formatting import format_ci
from agent.loop.log import StepRecord
from agent.loop.report import compact_label, label_legend, summary_markdown
from agent.rl.artefacts import SHIPPED_POLICY

runner = CliRunner()


def _policy(tmp_path: Path, name: str, model: bytes | None, config: str | bytes | None = None) -> Path:
    zip_path = tmp_path / f"{name}.zip"
    if model is not None:
        zip_path.write_bytes(model)
    text = SHIPPED_POLICY.with_suffix(".json").read_text() if config is None else config
    zip_path.with_suffix(".json").write_bytes(text.encode() if isinstance(text, str) else text)
    return zip_path


def _foreign_zip() -> bytes:
    import io

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("notes.txt", "not a policy")
    return buffer.getvalue()


SHIPPED = SHIPPED_POLICY.read_bytes()
SHIPPED_JSON = json.loads(SHIPPED_POLICY.with_suffix(".json").read_text())
MODELS = {
    "truncated": SHIPPED[: len(SHIPPED) // 2],
    "first-bytes": SHIPPED[:10],
    "empty": b"",
    "random": bytes(random.Random(1).randrange(256) for _ in range(4000)),
    "text": b"hello, not a zip\n",
    "zip-without-sb3-members": _foreign_zip(),
}
CONFIGS = {
    "not-json": "{oops",
    "empty": "",
    "a-list": "[1, 2]",
    "not-utf8": b"\xff\xfe\x00",
    "frame-stack-a-string": json.dumps({**SHIPPED_JSON, "frame_stack": "four"}),
    "negative-steps": json.dumps({**SHIPPED_JSON, "steps": -3}),
    "unknown-algo": json.dumps({**SHIPPED_JSON, "algo": "dqn"}),
    "nan-std-scale": json.dumps({**SHIPPED_JSON, "std_scale": "NaN"}),
    "codec-a-list": json.dumps({**SHIPPED_JSON, "codec": [1]}),
    "wrong-frame-stack": json.dumps({**SHIPPED_JSON, "frame_stack": 3}),  # loads, but not the trained shape
}


def _one_line_error(result, *, names: str) -> None:
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1 and names in lines[0], result.output
    assert "Traceback" not in result.output and "unexpected" not in lines[0]


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_a_corrupt_policy_zip_is_one_line_naming_it(tmp_path, made_backends, kind):
    policy = _policy(tmp_path, kind, MODELS[kind])
    out = tmp_path / "exp"
    result = runner.invoke(app, ["tune", "--policy", str(policy), "--steps", "2", "--out", str(out)])
    _one_line_error(result, names=f"{policy}:")
    assert not out.exists()  # nothing that looks like an experiment
    assert not made_backends  # failed before any backend started


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_a_corrupt_policy_json_is_one_line_naming_it(tmp_path, made_backends, kind):
    policy = _policy(tmp_path, kind, SHIPPED, CONFIGS[kind])
    out = tmp_path / "exp"
    result = runner.invoke(app, ["tune", "--policy", str(policy), "--steps", "2", "--out", str(out)])
    _one_line_error(result, names=f"{policy.with_suffix('.json')}:")
    assert not out.exists()


@pytest.mark.parametrize("command", [["tune", "--backend", "sim", "--cluster", "lab-small", "--method", "hill"],
                                     ["tune", "--backend", "local", "--cluster", "lab-small", "--method", "hill"],
                                     ["sim", "run", "--cluster", "lab-small"]])
def test_a_workload_naming_a_function_the_suite_lacks_names_the_file_before_anything_runs(tmp_path, made_backends,
                                                                                        command):
    import numpy as np

    from loadgen.workload import make_workload, write_workload

    path = tmp_path / "mine.parquet"
    write_workload(make_workload(np.linspace(0.0, 5.0, 4), ["float-ops", "nope"] * 2, metadata={"name": "x"}), path)
    out = tmp_path / "exp"
    result = runner.invoke(app, [*command, "--workload", str(path), "--out", str(out)])
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1].startswith(f"Error: {path}: field function: unknown function(s) ['nope']")
    assert not made_backends and not (out / "experiment.jsonl").exists() and not (out / "summary.json").exists()


ONE_NODE = """name: one-open-node
defaults: {pods: 110, image_pull_bandwidth: 50Mi}
groups:
  - {name: open, count: 1, cpu: "4", memory: 8Gi}
  - name: closed
    count: 2
    cpu: "4"
    memory: 8Gi
    taints: [{key: dedicated, value: batch, effect: NoSchedule}]
"""


def test_tune_says_before_the_first_run_when_no_weight_can_move_a_pod(tmp_path):
    (tmp_path / "one.yaml").write_text(ONE_NODE)
    args = ["tune", "--backend", "sim", "--workload", "lab", "--method", "random", "--steps", "1",
            "--out", str(tmp_path / "exp")]
    result = runner.invoke(app, [*args, "--cluster", str(tmp_path / "one.yaml")])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "every function passes the Filter plugins on one node at most (aes: open-0;" in text
    assert "no score weight can change a placement here" in text
    assert text.index("no score weight") < text.index("step 0")  # before the first run
    free = runner.invoke(app, [*args[:-1], str(tmp_path / "exp2"), "--cluster", "lab-taints"])  # PreferNoSchedule only
    assert free.exit_code == 0 and "no score weight" not in free.output


@pytest.mark.parametrize(("option", "value"), [
    ("--max-reruns", "-1"), ("--max-reruns", "1000000000"), ("--confirm", "-2"), ("--confirm", "1000000000"),
    ("--repeats", "0"), ("--repeats", "1000000000"), ("--steps", "0"), ("--steps", "-1"), ("--steps", "1000000000"),
    ("--seed", "-1"), ("--max-dispatch-lag-s", "nan"), ("--max-dispatch-lag-s", "0"), ("--max-late-share", "2"),
    ("--max-late-share", "nan"),
])
def test_tune_options_out_of_range_are_refused_before_anything_runs(tmp_path, made_backends, option, value):
    out = tmp_path / "exp"
    result = runner.invoke(app, ["tune", "--method", "hill", "--out", str(out), option, value])
    assert result.exit_code == 2 and option in result.output
    assert not out.exists() and not made_backends


@pytest.mark.parametrize(("option", "value"), [
    ("--seeds", "0"), ("--seeds", "-1"), ("--seeds", "1000000000000"), ("--steps", "0"), ("--jobs", "0"),
    ("--oracle-runs", "-1"), ("--sim-seed", "-5"),
])
def test_evaluate_options_out_of_range_are_refused(tmp_path, option, value):
    out = tmp_path / "eval"
    result = runner.invoke(app, ["evaluate", "--out", str(out), option, value])
    assert result.exit_code == 2 and option in result.output
    assert not out.exists()


def test_tune_and_evaluate_refuse_an_out_that_is_a_file(tmp_path, made_backends):
    afile = tmp_path / "afile"
    afile.write_text("x")
    result = runner.invoke(app, ["tune", "--method", "hill", "--steps", "1", "--out", str(afile)])
    _one_line_error(result, names=f"{afile}: not a directory")
    result = runner.invoke(app, ["evaluate", "--scenarios", "lab-web", "--seeds", "1", "--methods", "default",
                                 "--policy", "none", "--oracle-runs", "0", "--jobs", "1", "--out", str(afile)])
    _one_line_error(result, names=f"{afile}: not a directory")
    assert afile.read_text() == "x"


RESULTS_HEADER = "scenario,seed,method,metrics,oracle_search\n"


@pytest.mark.parametrize(("content", "where"), [
    (b"\x00\xff\xfe garbage", "not UTF-8"),
    (b"", "empty"),
    (RESULTS_HEADER.encode(), "no rows"),
    (b"a,b\n1,2\n", "not an evaluate results table (no column 'scenario')"),
    ((RESULTS_HEADER + "s,0,default,[1,,1.0\n").encode(), "row 2: field metrics"),
    ((RESULTS_HEADER + 's,0,default,"[NaN, 1.0]",1.0\n').encode(), "row 2: field metrics"),
    ((RESULTS_HEADER + 's,0,default,"[]",1.0\n').encode(), "row 2: field metrics"),
    ((RESULTS_HEADER + 's,0,default,"[0.2]",1.0\ns,x,equal,"[0.2]",1.0\n').encode(), "row 3: field seed"),
])
def test_combine_refuses_a_broken_results_table_naming_file_row_and_field(tmp_path, content, where):
    src = tmp_path / "eval"
    src.mkdir()
    (src / "results.csv").write_bytes(content)
    out = tmp_path / "combined"
    result = runner.invoke(app, ["combine", str(src), "--out", str(out)])
    _one_line_error(result, names=f"{src / 'results.csv'}: {where}")
    assert not out.exists()


def test_combine_refuses_a_file_for_a_directory(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    result = runner.invoke(app, ["combine", str(afile), "--out", str(tmp_path / "c")])
    _one_line_error(result, names=f"{afile}: not a directory")


@pytest.mark.parametrize(("option", "value", "says"), [
    ("--total-timesteps", "0", "--total-timesteps"), ("--num-envs", "0", "--num-envs"), ("--vec", "nosuch", "--vec"),
    ("--learning-rate", "nan", "--learning-rate"), ("--net-arch", "a,b", "--net-arch"),
])
def test_train_refuses_bad_options_in_one_line(tmp_path, option, value, says):
    out = tmp_path / "train"
    result = runner.invoke(app, ["train", "--out", str(out), "--vec", "dummy", option, value])
    _one_line_error(result, names=says)
    assert not out.exists()


# --- output people can read ----------------------------------------------------------------------


def _record(step: int, weights: dict, strategy: str = "LeastAllocated", shape=None, **kw) -> StepRecord:
    from agent.actions import WeightSetting

    setting = WeightSetting(weights=weights, strategy=strategy, shape=shape)
    base = dict(step=step, action=[0.0], setting=setting.to_dict(), label=setting.label(), metric=0.3 - 0.01 * step,
                samples=[0.3], reference_samples=[0.3], improvement_pct=3.3 * step, ci_low=1.23456789,
                ci_high=63.14159265, verdict="reference" if step == 0 else "no significant difference", reward=None,
                run_dirs=[], voided=[], finished_at=0.0)
    base.update(kw)
    return StepRecord(**base)


WIDE = {"TaintToleration": 100, "NodeAffinity": 100, "NodeResourcesFit": None, "PodTopologySpread": 100,
        "InterPodAffinity": 100, "NodeResourcesBalancedAllocation": 100, "ImageLocality": 100}


def test_step_lines_and_legend_fit_80_columns_without_cutting_names():
    records = [_record(0, WIDE), _record(12, WIDE, "RequestedToCapacityRatio", ((0, 0), (50, 7), (100, 10)))]
    console = Console(width=80, record=True, color_system=None)
    for line in label_legend(78):
        console.print(line)
    for r in records:
        console.print(step_lines(r, records))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    for r in records:  # each label on one line of its own, whole
        assert any(line.strip() == compact_label(r.setting) for line in text.splitlines())
    words = set(re.split(r"[\s,]+", text))
    for plugin in WIDE:  # the legend spells every plugin out, whole
        assert plugin in words


def test_the_evaluate_table_fits_80_columns_and_keeps_method_names_whole():
    import pandas as pd

    table = pd.read_csv(Path(agent.loop.backends.__file__).parents[2] / "docs" / "results" / "table.csv")
    console = Console(width=80, record=True, color_system=None)
    console.print(terminal_table(table, "tpe"))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    lines = text.splitlines()
    for method in table["method"]:
        assert any(line.startswith(f"{method} ") for line in lines), method


def _cells(row: str) -> list[str]:
    """GFM table cells: split on every ``|`` not escaped as ``\\|``."""
    inner = row.strip()[1:-1]
    return re.split(r"(?<!\\)\|", inner)


def test_summary_md_is_a_valid_gfm_table_with_pipes_escaped_and_rounded_intervals():
    records = [_record(0, WIDE, ci_low=None, ci_high=None), _record(1, WIDE), _record(2, WIDE, "MostAllocated")]
    summary = {"method": "hill", "backend": "local", "cluster": "lab-small", "workload": "lab", "metric": "mean",
               "reference_metric": 0.3, "best_metric": 0.28, "best_step": 2, "improvement_pct": 6.6,
               "verdict": "improvement", "applied_step": 2,
               "confirmation": {"samples": [1, 2, 3], "best_step": 2, "improvement_pct": 32.4123456,
                                "ci_low": 1.8123456789, "ci_high": 63.14159, "verdict": "improvement"}}
    text = summary_markdown(summary, records)
    rows = [line for line in text.splitlines() if line.startswith("|")]
    assert len(rows) == 2 + len(records)
    assert {len(_cells(row)) for row in rows} == {6}  # every row has the header's six columns
    assert all("\\|" in row for row in rows[2:])  # the label's "|" is escaped
    assert "+32.4 % [1.8, 63.1]" in text
    assert not re.search(r"\d\.\d{5,}", text)  # no 15-digit numbers anywhere
    assert format_ci(32.4123, 1.8123, 63.1415, unit=" %") == "+32.4 % [1.8, 63.1]"


def test_tuning_curves_have_integer_step_ticks(tmp_path, monkeypatch):
    import agent.loop.report

    figures = []
    monkeypatch.setattr(agent.loop.report, "save_figure_atomic", lambda fig, path: figures.append(fig))
    agent.loop.report.plot_tuning_curve([_record(k, WIDE) for k in range(3)], tmp_path / "c.png", title="t")
    ticks = [t for t in figures[0].axes[0].get_xticks() if -0.5 <= t <= 2.5]
    assert ticks and all(float(t).is_integer() for t in ticks)


def test_evaluate_curves_have_integer_step_ticks(tmp_path, monkeypatch):
    import agent.evaluation.tables
    from agent.evaluation.scoring import score

    figures = []
    monkeypatch.setattr(agent.evaluation.tables, "save_figure_atomic", lambda fig, path: figures.append(fig) or path)
    rows = [{"scenario": "s", "seed": 0, "method": m, "metrics": [1.0, 0.9, 0.95], "oracle_search": 0.8}
            for m in ("default", "hill")]
    agent.evaluation.tables.plot_curves(score(rows), tmp_path)
    ticks = [t for t in figures[0].axes[0].get_xticks() if -0.5 <= t <= 2.5]
    assert ticks and all(float(t).is_integer() for t in ticks)


@pytest.mark.parametrize(("command", "flags"), [
    ("tune", ("--overwrite", "--embedded-default")),
    ("evaluate", ("--oracle-only",)),
    ("train", ("--incumbent", "--normalize-reward", "--progress-bar")),
])
def test_flags_are_shown_as_flags_in_help(command, flags):
    result = runner.invoke(app, [command, "--help"], terminal_width=200)
    assert result.exit_code == 0
    for flag in flags:
        line = next(line for line in result.output.splitlines() if f"{flag} " in line)
        assert "<bool>" not in line and "BOOLEAN" not in line, line


def test_a_missing_extra_is_one_line_naming_it(monkeypatch, tmp_path):
    """Without the ``rl`` extra (PyTorch, SB3) the policy cannot load: say which extra installs it."""
    import agent.rl.artefacts

    def no_torch(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'torch'", name="torch")

    monkeypatch.setattr(agent.rl.artefacts, "policy_method", no_torch)
    result = CliRunner().invoke(app, ["tune", "--backend", "sim", "--workload", "lab", "--policy",
                                      "agent/policies/scoretune-ppo.zip", "--steps", "1", "--out", str(tmp_path / "o")])
    assert result.exit_code == 1
    assert "needs torch, which scoretune's 'rl' extra installs: pip install 'scoretune[rl]'" in result.output


def test_the_lab_installs_without_pytorch():
    """``make testbed-up`` installs the ``lab`` extra: Ansible's collections, and no PyTorch or Ray
    in the core dependencies it pulls."""
    import tomllib

    root = Path(__file__).resolve().parents[2]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    core = {re.split(r"[<>=!\[ ]", d)[0].lower() for d in project["dependencies"]}
    assert not core & {"torch", "stable-baselines3", "sb3-contrib", "tensorboard", "ray"}
    extras = project["optional-dependencies"]
    assert any(d.startswith("ansible>=") for d in extras["lab"]) and any(d == "torch==2.13.0" for d in extras["rl"])
    assert set(extras["rl"]) <= set(extras["dev"]) and set(extras["lab"]) <= set(extras["dev"])
    makefile = (root / "Makefile").read_text()
    assert re.search(r"^testbed-up: setup-lab$", makefile, re.M) and "-e '.[lab]'" in makefile
    assert "-e '.[rl]'" in makefile  # make tune: the policy's extra
