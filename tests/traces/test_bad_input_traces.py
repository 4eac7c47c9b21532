"""Malformed trace and workload files: each raises TraceError naming the file, line and field."""

from __future__ import annotations

import pytest

from deepboot_env.sim.workload import WorkloadError
from traces.loaders import TraceError, load_philly, load_workload

POLLUX = "name,time,application,num_replicas,batch_size\n"
DEEPBOOT = "name,time,application,num_replicas,batch_size,duration,num_task\n"
PHILLY = "timestamp,duration,num_gpus,gpu_time,cluster\n"
TRAIN1 = "cifar10-0,10,cifar10,6,2048\n"
TRAIN1_DB = "cifar10-0,10,cifar10,6,2048,-1.0,-1\n"

# id: (file content, expected line, expected field text, expected words in the reason)
WORKLOAD_CASES: dict[str, tuple[str, int, str, str]] = {
    "empty_file": ("", 1, "header", "empty"),
    "header_only": (POLLUX, 2, "row", "no data rows"),
    "header_only_deepboot_blank_lines": (DEEPBOOT + "\n\n", 2, "row", "no data rows"),
    "unknown_columns": ("name,time,app,num_replicas,batch_size\n" + TRAIN1, 1, "header", "'application'"),
    "unrelated_columns": ("a,b,c\n1,2,3\n", 1, "header", "missing column"),
    "duplicate_column": ("name,time,application,num_replicas,batch_size,time\n", 1, "header", "duplicate"),
    "raw_philly_trace": (PHILLY + "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n", 1, "header", "deepboot generate"),
    "non_numeric_time": (POLLUX + TRAIN1 + "ncf-1,soon,ncf,1,32768\n", 3, "'time'", "not a number"),
    "empty_time": (POLLUX + "ncf-1,,ncf,1,32768\n", 2, "'time'", "not a number"),
    "nan_time": (POLLUX + "ncf-1,nan,ncf,1,32768\n", 2, "'time'", "finite"),
    "inf_time": (POLLUX + "ncf-1,inf,ncf,1,32768\n", 2, "'time'", "finite"),
    "negative_time": (POLLUX + "ncf-1,-5,ncf,1,32768\n", 2, "'time'", "negative"),
    "unsorted_rows": (POLLUX + TRAIN1 + "ncf-1,5,ncf,1,32768\n", 3, "'time'", "not sorted"),
    "unsorted_after_blank_line": (POLLUX + TRAIN1 + "\n" + "ncf-1,5,ncf,1,32768\n", 4, "'time'", "not sorted"),
    "unknown_application": (POLLUX + "resnet-0,10,resnet50,4,256\n", 2, "'application'", "resnet50"),
    "inference_unknown_model": (
        DEEPBOOT + TRAIN1_DB + "inference-gpt-1,12,infer-gpt-1,1,1,5.0,10\n",
        3,
        "'application'",
        "gpt",
    ),
    "inference_row_in_pollux_format": (POLLUX + "inference-ncf-1,12,infer-ncf-1,1,1\n", 2, "'application'", "duration"),
    "duplicate_job_name": (POLLUX + TRAIN1 + "cifar10-0,20,cifar10,8,2048\n", 3, "'name'", "duplicate"),
    "empty_name": (POLLUX + ",10,cifar10,6,2048\n", 2, "'name'", "empty"),
    "zero_replicas": (POLLUX + "ncf-1,10,ncf,0,32768\n", 2, "'num_replicas'", ">= 1"),
    "negative_batch_size": (POLLUX + "ncf-1,10,ncf,1,-32\n", 2, "'batch_size'", ">= 1"),
    "fractional_replicas": (POLLUX + "ncf-1,10,ncf,1.5,32768\n", 2, "'num_replicas'", "integer"),
    "non_numeric_batch_size": (POLLUX + "ncf-1,10,ncf,1,big\n", 2, "'batch_size'", "not a number"),
    "zero_inference_duration": (DEEPBOOT + "inference-ncf-0,12,infer-ncf-1,1,1,0.0,10\n", 2, "'duration'", "> 0"),
    "negative_inference_duration": (
        DEEPBOOT + TRAIN1_DB + "inference-ncf-0,12,infer-ncf-1,1,1,-3,10\n",
        3,
        "'duration'",
        "> 0",
    ),
    "nan_inference_duration": (DEEPBOOT + "inference-ncf-0,12,infer-ncf-1,1,1,nan,10\n", 2, "'duration'", "finite"),
    "batch_size_beyond_app_max": (POLLUX + TRAIN1 + "bert-0,20,bert,4,100000000000\n", 3, "'batch_size'", "(384)"),
    "batch_size_1e11": (POLLUX + "ncf-1,10,ncf,1,1e11\n", 2, "'batch_size'", "exceeds the largest total batch of ncf"),
    "underscore_in_time": (POLLUX + "ncf-1,1_000,ncf,1,32768\n", 2, "'time'", "standard notation: '1_000' (write 1000"),
    "underscore_in_batch_size": (POLLUX + "cifar10-0,10,cifar10,6,2_048\n", 2, "'batch_size'", "standard notation"),
    "underscore_in_replicas": (POLLUX + "cifar10-0,10,cifar10,1_2,2048\n", 2, "'num_replicas'", "standard notation"),
    "underscore_in_inference_duration": (
        DEEPBOOT + "inference-ncf-0,12,infer-ncf-1,1,1,1_0.5,10\n",
        2,
        "'duration'",
        "(write 10.5",
    ),
    "space_inside_number": (POLLUX + "ncf-1,1 000,ncf,1,32768\n", 2, "'time'", "not a number"),
    "infinity_spelled_out": (POLLUX + "ncf-1,Infinity,ncf,1,32768\n", 2, "'time'", "finite"),
    "nan_batch_size": (POLLUX + "ncf-1,10,ncf,1,NaN\n", 2, "'batch_size'", "finite"),
    "hex_number": (POLLUX + "ncf-1,0x10,ncf,1,32768\n", 2, "'time'", "not a number"),
    # value classes once accepted silently (issue 33)
    "replicas_beyond_batch": (POLLUX + "ncf-1,10,ncf,64,32\n", 2, "'num_replicas'", "each GPU needs a sample"),
    "huge_replicas": (
        POLLUX + "ncf-1,10,ncf,1e300,32768\n",
        2,
        "'num_replicas'",
        "is beyond the limit of 1e+12 for a whole number",
    ),
    "name_beyond_limit": (POLLUX + "n" * 300 + ",10,ncf,1,32768\n", 2, "'name'", "longer than the limit of 256"),
    "newline_in_name": (POLLUX + '"a\nb",10,ncf,1,32768\n', 3, "'name'", "control character"),
    "nul_in_name": (POLLUX + "a\x00b,10,ncf,1,32768\n", 2, "'name'", "control character"),
    "duplicate_request_name": (
        DEEPBOOT + "r,1,infer-ncf-1,1,1,5,1\nr,2,infer-ncf-1,1,1,5,1\n",
        3,
        "'name'",
        "duplicate name 'r' (first at line 2)",
    ),
    "job_and_request_share_a_name": (
        DEEPBOOT + TRAIN1_DB + "cifar10-0,12,infer-ncf-1,1,1,5,1\n",
        3,
        "'name'",
        "duplicate",
    ),
    "denormal_inference_duration": (DEEPBOOT + "r,12,infer-ncf-1,1,1,1e-320,1\n", 2, "'duration'", "[0.001, 1e+12]"),
    "huge_inference_duration": (DEEPBOOT + "r,12,infer-ncf-1,1,1,1e300,1\n", 2, "'duration'", "[0.001, 1e+12]"),
    "time_beyond_limit": (POLLUX + "ncf-1,1e300,ncf,1,32768\n", 2, "'time'", "beyond the limit of 1e+12 s"),
    "line_beyond_limit": (POLLUX + "ncf-1,10,ncf,1," + "3" * 70_000 + "\n", 2, "row", "longer than the limit"),
    "header_with_many_columns": (
        ",".join(f"c{k}" for k in range(1000)) + "\n",
        1,
        "header",
        "more than the limit of 64",
    ),
    "missing_field": (POLLUX + "ncf-1,10,ncf,1\n", 2, "row", "expected 5 fields"),
    "extra_field": (POLLUX + TRAIN1 + "ncf-1,10,ncf,1,32768,7\n", 3, "row", "got 6"),
}


@pytest.mark.parametrize("case", sorted(WORKLOAD_CASES))
def test_malformed_workload_names_file_line_and_field(tmp_path, case):
    content, line, field, words = WORKLOAD_CASES[case]
    path = tmp_path / f"{case}.csv"
    path.write_text(content)
    with pytest.raises(TraceError) as info:
        load_workload(path)
    msg = str(info.value)
    assert isinstance(info.value, WorkloadError)
    assert path.name in msg
    assert f"line {line}" in msg
    assert field in msg
    assert words in msg
    assert info.value.line == line


def test_non_ascii_digits_are_not_standard_notation(tmp_path):
    path = tmp_path / "arabic.csv"
    path.write_text(POLLUX + "ncf-1,\u0661\u0660,ncf,1,32768\n", encoding="utf-8")  # float() reads 10
    with pytest.raises(TraceError, match=r"line 2: field 'time': not a number in standard notation") as info:
        load_workload(path)
    assert info.value.field == "time"
    philly = tmp_path / "philly.csv"
    philly.write_text(PHILLY + "2017-10-09 07:01:55,66,1,66,a\n2017-10-09 07:01:56,6_6,1,66,a\n", encoding="utf-8")
    with pytest.raises(TraceError, match=r"philly.csv: line 3: field 'duration': not a number in standard notation"):
        load_philly(philly)


def test_standard_notation_variants_and_the_largest_batch_load(tmp_path):
    path = tmp_path / "ok.csv"
    rows = [
        "a,+0,cifar10,6,4096",  # the largest cifar10 batch
        "b, 1e1 ,bert,4.0,384",  # spaces around, exponent, a whole float
        "c,10.,ncf,1,3.2768e4",
        "d,.5e2,yolov3,4,512",
    ]
    path.write_text(POLLUX + "\n".join(rows) + "\n")
    wl = load_workload(path)
    assert [j.arrival for j in wl.jobs] == [0.0, 10.0, 10.0, 50.0]
    assert [j.batch_size for j in wl.jobs] == [4096, 384, 32768, 512]
    assert wl.jobs[1].num_replicas == 4


# the probes of the trust issue, through the CLI: exit status 2 and one line on stderr
CLI_CASES: dict[str, tuple[str, list[str], str]] = {
    "huge_batch": (POLLUX + "bert-0,10,bert,4,100000000000\n", [], "line 2: field 'batch_size': batch size"),
    "arrival_after_max_time": (
        POLLUX + TRAIN1 + "ncf-1,1000000000000,ncf,1,32768\n",
        [],
        "training job 2 ('ncf-1'): field 'time': arrives at 1e+12 s, after the end of the simulation",
    ),
    "underscore": (POLLUX + "ncf-1,1_000,ncf,1,32768\n", [], "line 2: field 'time': not a number in standard notation"),
    "gang_beyond_cluster": (
        POLLUX + "imagenet-0,10,imagenet,1000,6400\n",
        ["--cluster", "4x4+4x4"],
        "training job 1 ('imagenet-0'): field 'num_replicas': requests 1000 GPUs but the cluster 4x4+4x4 has only 32",
    ),
}


@pytest.mark.parametrize("case", sorted(CLI_CASES))
def test_cli_refuses_bad_workloads_in_one_line(tmp_path, capsys, case):
    from deepboot_harness.cli import main

    content, extra, fragment = CLI_CASES[case]
    path = tmp_path / f"{case}.csv"
    path.write_text(content)
    assert main(["simulate", "--workload", str(path), "--policy", "fifo", "--quiet", *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("deepboot simulate: error: ")
    assert path.name in err and fragment in err


def test_training_rows_duration_and_num_task_are_ignored(tmp_path):
    path = tmp_path / "ok.csv"
    path.write_text(DEEPBOOT + "cifar10-0,10,cifar10,6,2048,whatever,\n")
    wl = load_workload(path)
    assert len(wl.jobs) == 1 and wl.requests == ()


def test_nonexistent_path(tmp_path):
    path = tmp_path / "missing-workload.csv"
    with pytest.raises(TraceError, match="missing-workload") as info:
        load_workload(path)
    assert "no such file" in str(info.value)


def test_directory_instead_of_file(tmp_path):
    folder = tmp_path / "a-folder"
    folder.mkdir()
    with pytest.raises(TraceError, match="a-folder.*directory"):
        load_workload(folder)
    with pytest.raises(TraceError, match="directory"):
        load_philly(folder)


# Philly traces: (content, line, field)
PHILLY_CASES: dict[str, tuple[str, int, str]] = {
    "philly_missing_column": ("timestamp,duration,num_gpus,cluster\n", 1, "header"),
    "philly_empty": ("", 1, "header"),
    "philly_header_only": (PHILLY, 2, "row"),
    "philly_bad_timestamp": (PHILLY + "2017-10-09 07:01:55,66.0,1,66.0,a\nyesterday,5,1,5,a\n", 3, "'timestamp'"),
    "philly_bad_duration": (PHILLY + "2017-10-09 07:01:55,long,1,66.0,a\n", 2, "'duration'"),
    "philly_nan_gpu_time": (PHILLY + "2017-10-09 07:01:55,66,1,nan,a\n", 2, "'gpu_time'"),
    "philly_zero_gpus": (PHILLY + "2017-10-09 07:01:55,66,0,0,a\n", 2, "'num_gpus'"),
    "philly_negative_duration": (PHILLY + "2017-10-09 07:01:55,-66,1,66,a\n", 2, "'duration'"),
}


@pytest.mark.parametrize("case", sorted(PHILLY_CASES))
def test_malformed_philly_names_file_line_and_field(tmp_path, case):
    content, line, field = PHILLY_CASES[case]
    path = tmp_path / f"{case}.csv"
    path.write_text(content)
    with pytest.raises(TraceError) as info:
        load_philly(path)
    msg = str(info.value)
    assert path.name in msg and f"line {line}" in msg and field in msg


def test_philly_loads_a_tiny_valid_trace(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text(PHILLY + "2017-10-09 07:01:55,66.0,2,132.0,11cb48\n2017-10-10 00:00:00,60,1,60,6214e9\n")
    tr = load_philly(path)
    assert len(tr) == 2
    assert tr.timestamp[0] % 86400 == 7 * 3600 + 60 + 55
    assert tr.num_gpus.tolist() == [2, 1] and tr.cluster.tolist() == ["11cb48", "6214e9"]


@pytest.mark.parametrize("columns", [100_000, 5_000])
def test_a_row_or_header_with_very_many_columns_fails_fast(tmp_path, columns):
    """A 100,000-column line once hung the loader (a quadratic duplicate check); now it is
    refused in well under a second, naming the file, the line and the limit."""
    import time

    for content, line in (
        ("a," * columns + "a\n", 1),
        (POLLUX + TRAIN1 + "x," * columns + "x\n", 3),
    ):
        path = tmp_path / f"wide-{line}.csv"
        path.write_text(content)
        start = time.perf_counter()
        with pytest.raises(TraceError) as info:
            load_workload(path)
        assert time.perf_counter() - start < 2.0
        assert path.name in str(info.value) and info.value.line == line
        assert "limit" in str(info.value) or f"got {columns + 1:,}" in str(info.value)


def test_a_workload_beyond_the_row_limit_is_refused_with_an_estimate(tmp_path, monkeypatch):
    import traces.loaders as loaders

    monkeypatch.setattr(loaders, "MAX_WORKLOAD_ROWS", 3)
    path = tmp_path / "big.csv"
    path.write_text(POLLUX + "".join(f"j{k},{k},ncf,1,32768\n" for k in range(10)))
    with pytest.raises(TraceError, match=r"line 5: field 'row': more than the limit of 3 rows: .* GB and") as info:
        load_workload(path)
    assert "\n" not in str(info.value)
    monkeypatch.setattr(loaders, "MAX_WORKLOAD_ROWS", 10)
    assert len(load_workload(path).jobs) == 10


def test_formula_cells_are_neutralised_in_csv_outputs(tmp_path):
    """A job named like a spreadsheet formula is loaded as it is and written with a leading ' to
    every CSV output (OWASP's advice for CSV injection); numbers, negative ones included, stay."""
    import csv

    from deepboot_env.limits import safe_cell
    from deepboot_harness.cli import main

    assert [safe_cell(v) for v in ("=1+1", "+x", "-x", "@x", "\tx", "ok", -3, 2.5)] == [
        "'=1+1",
        "'+x",
        "'-x",
        "'@x",
        "'\tx",
        "ok",
        -3,
        2.5,
    ]
    path = tmp_path / "formula.csv"
    path.write_text(POLLUX + '"=HYPERLINK(""http://x"")",10,ncf,1,32768\n@cmd,20,cifar10,1,128\n')
    assert {j.name for j in load_workload(path).jobs} == {'=HYPERLINK("http://x")', "@cmd"}
    out = tmp_path / "out"
    assert main(["compare", "--workloads", str(path), "--policies", "fifo", "--out", str(out), "--quiet"]) == 0
    with open(out / "jcts.csv", newline="") as fh:
        jobs = {row["job"] for row in csv.DictReader(fh)}
    assert jobs == {'\'=HYPERLINK("http://x")', "'@cmd"}
