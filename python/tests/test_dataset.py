"""sluice.Dataset: one epoch per iteration, each sample once per epoch,
an error (never an empty epoch) when the epochs are spent, set_epoch,
exact mid-epoch resume from state_dict (before + after = one epoch, no
overlap) in the same Dataset and in a new one, and DataLoader workers."""

import os
import subprocess

import pytest

torch = pytest.importorskip("torch")
import sluice  # noqa: E402

ROWS = 6000


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    binary = os.environ.get("SLUICE_BINARY")
    if not binary:
        pytest.skip("needs SLUICE_BINARY")
    t = str(tmp_path_factory.mktemp("ds") / "sessions")
    subprocess.run([binary, "table", "gen", "--preset", "sessions", "--rows", str(ROWS),
                    "--table", t, "--seed", "5"], check=True, capture_output=True)
    return t


def spec(epochs=2, size=500):
    return {"id": "ds", "batch": {"size": size, "epochs": epochs,
                                  "shuffle": {"splits": True, "seed": 3}}}


def ids_of(items):
    out = []
    for b in items:
        out += b["sample_ids"].tolist()
    return out


def test_each_iteration_is_one_epoch_and_then_an_error(table):
    with sluice.Dataset(table, spec()) as ds:
        for epoch in range(2):
            assert ds.epoch == epoch
            batches = list(ds)
            assert {b["epoch"] for b in batches} == {epoch}
            ids = ids_of(batches)
            assert sorted(ids) == sorted(set(ids)) and len(ids) == ROWS
        with pytest.raises(sluice.SluiceError, match="all 2 epochs were read"):
            next(iter(ds))
        ds.set_epoch(1)  # read one again
        assert len(ids_of(ds)) == ROWS
        with pytest.raises(ValueError, match="epoch 2 is not in 0..1"):
            ds.set_epoch(2)


def test_state_dict_mid_epoch_resumes_exactly(table):
    with sluice.Dataset(table, spec()) as ds:
        it = iter(ds)
        before = ids_of(next(it) for _ in range(3))
        state = ds.state_dict()
        assert state["epoch"] == 0 and len(state["tokens"]) == 1
        # the same Dataset, in place
        ds.load_state_dict(state)
        after = ids_of(ds)
        assert not set(before) & set(after)
        assert sorted(before + after) == sorted(set(before + after)) and len(before + after) == ROWS
        assert ds.epoch == 1
    # a new process would make a new Dataset (with its own master): the same
    with sluice.Dataset(table, spec()) as ds2:
        ds2.load_state_dict(state)
        again = ids_of(ds2)
        assert sorted(before + again) == list(sorted(set(before + again)))
        assert len(before + again) == ROWS
        with pytest.raises(ValueError, match="the state is of job 'x'"):
            ds2.load_state_dict(dict(state, name="x"))


def test_a_dataloader_with_workers_reads_each_sample_once_per_epoch(table):
    with sluice.Dataset(table, spec()) as ds:
        dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
                                         persistent_workers=True)
        for epoch in range(2):
            batches = list(dl)
            assert {b["epoch"] for b in batches} == {epoch}
            ids = ids_of(batches)
            assert len(ids) == ROWS and len(set(ids)) == ROWS


def test_nothing_to_read_is_an_error_not_an_empty_epoch(table):
    s = spec(epochs=1)
    s["filters"] = [{"op": "label_range", "label": "click", "min": 5, "max": 6}]
    with sluice.Dataset(table, s) as ds:
        with pytest.raises(sluice.SluiceError, match="epoch 0 gave no batch"):
            list(ds)


def test_arguments():
    with pytest.raises(ValueError, match="give a table"):
        sluice.Dataset()
    with pytest.raises(ValueError, match="needs both master"):
        sluice.Dataset("/t", master="127.0.0.1:1")


def test_the_weight_label_column_is_named_before_the_first_batch(table, tmp_path):
    """negative_downsample adds a label column: the worker says so when it
    starts the job, before any batch, and each batch names its columns."""
    spec = {"id": "nd", "source": {"table": table}, "batch": {"size": 500},
            "filters": [{"op": "negative_downsample", "label": "click", "rate": 0.5}]}
    path = tmp_path / "nd.json"
    path.write_text(__import__("json").dumps(spec))
    w = subprocess.Popen([os.environ["SLUICE_BINARY"], "worker", "--job", str(path), "--listen",
                          "127.0.0.1:0", "--exit-when-done"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        before = []
        for line in w.stdout:
            if line.startswith("listening on "):
                addr = line.split()[-1]
                break
            before.append(line)
        assert any("negative_downsample adds the label column 'weight'" in l for l in before), before
        with sluice.Client(addr, timeout_ms=30000) as c:
            b = c.next()
            assert b.label_names == ["click", "weight"]
            assert list(b.to_dict()["labels"]) == ["click", "weight"]
            del b
            for _ in c:
                pass
    finally:
        w.kill()
        w.wait()


def test_deterministic_order_resumes_the_same_sequence_in_a_new_dataset(table):
    """A job in the deterministic order: each batch's order_g is its place in
    the epoch's global sequence (one rank: 0, 1, ...), and a new Dataset
    resumed from a state taken after 3 batches reads the rest of the
    reference run's sequence, batch by batch, renumbered from 0, then the
    next epoch as the reference run did."""
    det = dict(spec(), order="deterministic")
    with sluice.Dataset(table, det) as ds:
        reference = [[(b["order_g"], b["sample_ids"].tolist()) for b in ds] for _ in range(2)]
    for epoch in reference:
        assert [g for g, _ in epoch] == list(range(len(epoch)))
        assert len(epoch) == ROWS // 500
    with sluice.Dataset(table, det) as ds:
        it = iter(ds)
        before = [(b["order_g"], b["sample_ids"].tolist()) for b in (next(it) for _ in range(3))]
        state = ds.state_dict()
    assert before == reference[0][:3]
    with sluice.Dataset(table, det) as ds2:
        ds2.load_state_dict(state)
        rest = [(b["order_g"], b["sample_ids"].tolist()) for b in ds2]
        assert rest == [(g - 3, ids) for g, ids in reference[0][3:]]
        assert [(b["order_g"], b["sample_ids"].tolist()) for b in ds2] == reference[1]
