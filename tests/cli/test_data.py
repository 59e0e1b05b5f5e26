"""Tests of pytrain.data on scikit-learn's bundled datasets written to CSV / npz / raw / images."""
from __future__ import annotations

import builtins
import csv
import io
import os

import numpy as np
import pytest
from sklearn.datasets import load_diabetes, load_digits, load_iris, load_wine

from pytrain import data
from pytrain.errors import DataError, PytrainError


# ---------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def iris():
    return load_iris()


@pytest.fixture(scope="module")
def digits():
    return load_digits()


def write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return str(path)


@pytest.fixture
def iris_csv(tmp_path, iris):
    """Iris with its species as text labels, the label column in the middle."""
    names = ["sepal_length", "sepal_width", "species", "petal_length", "petal_width"]
    rows = []
    for feats, t in zip(iris.data.tolist(), iris.target.tolist()):
        rows.append([feats[0], feats[1], iris.target_names[t], feats[2], feats[3]])
    return write_csv(tmp_path / "iris.csv", names, rows)


# ---------------------------------------------------------------- CSV

def test_csv_text_labels_map_to_sorted_ids(iris_csv, iris):
    ds = data.load_csv(iris_csv, label="species", task="classification")
    assert ds.x.dtype == np.float32 and ds.x.shape == (150, 4)
    np.testing.assert_array_equal(ds.x, iris.data.astype(np.float32))
    assert ds.classes == sorted(iris.target_names.tolist())
    assert ds.y.dtype == np.int64
    names = np.array(ds.classes)[ds.y]
    np.testing.assert_array_equal(names, iris.target_names[iris.target])
    assert ds.feature_names == ["sepal_length", "sepal_width", "petal_length", "petal_width"]
    x, y = ds  # unpacks like a tuple
    assert x is ds.x and y is ds.y and len(ds) == 150


def test_csv_from_text_and_bytes_equals_from_path(iris_csv):
    from_path = data.load_csv(iris_csv, label="species")
    with open(iris_csv) as f:
        text = f.read()
    from_text = data.load_csv(text, label="species")
    from_bytes = data.load_csv(("\ufeff" + text).encode("utf-8"), label="species", name="up.csv")
    for ds in (from_text, from_bytes):
        np.testing.assert_array_equal(ds.x, from_path.x)
        np.testing.assert_array_equal(ds.y, from_path.y)
        assert ds.classes == from_path.classes
    assert from_bytes.source == "up.csv"
    assert from_path.task == "classification"  # inferred from text labels


def test_csv_numeric_class_ids_and_drop(tmp_path):
    wine = load_wine()
    names = ["id"] + list(wine.feature_names) + ["cultivar"]
    rows = [[i] + f + [t] for i, (f, t) in enumerate(zip(wine.data.tolist(), wine.target.tolist()))]
    path = write_csv(tmp_path / "wine.csv", names, rows)
    ds = data.load_csv(path, label="cultivar", drop=["id"])
    assert ds.task == "classification" and ds.classes is None
    np.testing.assert_array_equal(ds.y, wine.target)
    np.testing.assert_array_equal(ds.x, wine.data.astype(np.float32))
    assert ds.x.shape == (178, 13)


def test_csv_regression_and_multi_target(tmp_path):
    db = load_diabetes()
    names = list(db.feature_names) + ["progression"]
    rows = [f + [t] for f, t in zip(db.data.tolist(), db.target.tolist())]
    path = write_csv(tmp_path / "diabetes.csv", names, rows)
    ds = data.load_csv(path, label="progression", task="regression")
    assert ds.y.dtype == np.float32 and ds.y.shape == (442,)
    np.testing.assert_array_equal(ds.y, db.target.astype(np.float32))
    # integral targets would be inferred as classes, so regression must be asked for; with two
    # label columns the task is regression
    two = data.load_csv(path, label=["bmi", "progression"])
    assert two.task == "regression" and two.y.shape == (442, 2) and two.x.shape == (442, 9)
    np.testing.assert_array_equal(two.y[:, 0], db.data[:, 2].astype(np.float32))


def test_csv_validation_set_uses_training_classes(tmp_path):
    train = data.load_csv("f,lab\n1,cat\n2,dog\n3,emu\n", label="lab")
    val = data.load_csv("f,lab\n5,emu\n6,cat\n", label="lab", classes=train.classes)
    assert val.classes == ["cat", "dog", "emu"]
    np.testing.assert_array_equal(val.y, [2, 0])
    with pytest.raises(DataError, match=r"line 3: label 'yak' is not one of the known classes: cat, dog, emu"):
        data.load_csv("f,lab\n5,emu\n6,yak\n", label="lab", classes=train.classes)


def test_csv_blank_lines_and_quoted_cells():
    ds = data.load_csv('a,"b, with comma",y\n\n1,"2",0\n3,4,1\n\n', label="y")
    np.testing.assert_array_equal(ds.x, [[1, 2], [3, 4]])
    assert ds.feature_names == ["a", "b, with comma"]


@pytest.mark.parametrize("text, label, message", [
    ("a,b,y\n1,2,0\n3,oops,1\n", "y", r"data\.csv line 3, column 'b': 'oops' is not a number"),
    ("a,b,y\n1,2,0\n3,,1\n", "y", r"data\.csv line 3, column 'b': an empty cell is not a number"),
    ("a,b,y\n1,nan,0\n", "y", r"line 2, column 'b': 'nan' is not a number \(expected a finite number\)"),
    ("a,b,y\n1,2,0\n", "label", r"label column 'label' not found; available columns: 'a', 'b', 'y'"),
    ("a,b,y\n1,2,0\n", None, r"no label column given; name one of the columns: 'a', 'b', 'y'"),
    ("a,b,y\n1,2,0\n3,4\n", "y", r"line 3: 2 cells, expected 3 \(one per header column\)"),
    ("", "y", r"data\.csv is empty"),
    ("a,b,y\n", "y", r"has a header but no data rows"),
    ("a,a,y\n1,2,0\n", "y", r"line 1: column name 'a' appears twice"),
    ("a,,y\n1,2,0\n", "y", r"line 1: column 2 has an empty name"),
    ("y\n1\n", "y", r"no feature columns left besides the label column\(s\) 'y'"),
    ("a,y\n1,0\n2,\n", "y", r"column 'y' line 3: the label is an empty cell"),
])
def test_csv_errors(text, label, message):
    with pytest.raises(DataError, match=message):
        data.load_csv(text.encode(), label=label, name="data.csv")


def test_csv_regression_target_errors_and_fractional_class(tmp_path):
    with pytest.raises(DataError, match=r"t\.csv line 3, column 'y': 'big' is not a regression target"):
        data.load_csv("a,y\n1,0.5\n2,big\n".encode(), label="y", task="regression", name="t.csv")
    with pytest.raises(DataError, match=r"column 'y' line 3: label -1\.0 is not a class id \(an integer >= 0\)"):
        data.load_csv("a,y\n1,0\n2,-1\n", label="y", task="classification")
    with pytest.raises(DataError, match=r"label 0\.5 is not a class id.*use task 'regression'"):
        data.load_csv("a,y\n1,0.5\n2,1\n", label="y", task="classification")
    with pytest.raises(DataError, match=r"task must be 'classification' or 'regression', got 'clustering'"):
        data.load_csv("a,y\n1,0\n", label="y", task="clustering")


def test_csv_file_errors(tmp_path):
    missing = str(tmp_path / "nope.csv")
    with pytest.raises(DataError, match=r"data file '.*nope\.csv' does not exist"):
        data.load_csv(missing, label="y")
    with pytest.raises(DataError, match=r"is a directory, expected a file"):
        data.load_csv(str(tmp_path), label="y")
    with pytest.raises(DataError, match=r"bin\.csv' is not UTF-8 text \(bad byte at offset 2\)"):
        data.load_csv(b"a,\xff\xfe", label="y", name="bin.csv")
    assert issubclass(DataError, PytrainError)


def test_to_csv_text_round_trips_float32(digits):
    x = (digits.data[:50] / 7.0).astype(np.float32)
    text = data.to_csv_text(x, digits.target[:50])
    ds = data.load_csv(text, label="label")
    np.testing.assert_array_equal(ds.x, x)
    np.testing.assert_array_equal(ds.y, digits.target[:50])


# ---------------------------------------------------------------- npz

def test_npz_from_path_and_bytes(tmp_path, digits):
    path = tmp_path / "digits.npz"
    np.savez(path, x=digits.data, y=digits.target)
    ds = data.load_npz(str(path))
    assert ds.x.dtype == np.float32 and ds.x.shape == (1797, 64)
    assert ds.y.dtype == np.int64 and ds.task == "classification"
    np.testing.assert_array_equal(ds.y, digits.target)
    ds2 = data.load_npz(path.read_bytes(), name="digits.npz")
    np.testing.assert_array_equal(ds2.x, ds.x)
    # images keep their sample shape
    np.savez(path, x=digits.images.astype(np.uint8), y=digits.target.reshape(-1, 1))
    ds3 = data.load_npz(str(path))
    assert ds3.x.shape == (1797, 8, 8) and ds3.y.shape == (1797,)


def test_npz_text_labels_and_regression(tmp_path, iris):
    path = tmp_path / "iris.npz"
    np.savez(path, x=iris.data, y=iris.target_names[iris.target])
    ds = data.load_npz(str(path))
    assert ds.classes == ["setosa", "versicolor", "virginica"]
    np.testing.assert_array_equal(ds.y, iris.target)
    np.savez(path, x=iris.data[:, :3], y=iris.data[:, 3])
    reg = data.load_npz(str(path))
    assert reg.task == "regression" and reg.y.dtype == np.float32
    with pytest.raises(DataError, match="regression targets must be numbers, got text labels"):
        np.savez(path, x=iris.data, y=iris.target_names[iris.target])
        data.load_npz(str(path), task="regression")


def test_npz_errors(tmp_path, digits):
    path = tmp_path / "d.npz"
    np.savez(path, features=digits.data, y=digits.target)
    with pytest.raises(DataError, match=r"d\.npz: array 'x' not found; the archive holds: 'features', 'y'"):
        data.load_npz(str(path))
    np.savez(path, x=digits.data, y=digits.target[:-1])
    with pytest.raises(DataError, match=r"x has 1797 samples but y has 1796"):
        data.load_npz(str(path))
    with pytest.raises(DataError, match=r"junk\.npz is not a readable \.npz archive"):
        data.load_npz(b"this is not a zip", name="junk.npz")
    good = io.BytesIO()
    np.savez(good, x=digits.data, y=digits.target)
    with pytest.raises(DataError, match=r"cut\.npz"):
        data.load_npz(good.getvalue()[:300], name="cut.npz")
    bad = digits.data.copy()
    bad[7, 3] = np.nan
    np.savez(path, x=bad, y=digits.target)
    with pytest.raises(DataError, match=r"sample 7: features contain NaN or infinity"):
        data.load_npz(str(path))
    y = digits.target.astype(np.float64)
    y[4] = 2.5
    np.savez(path, x=digits.data, y=y)
    with pytest.raises(DataError, match=r"sample 4: label 2\.5 is not a class id"):
        data.load_npz(str(path), task="classification")
    np.save(tmp_path / "single.npy", digits.data)
    with pytest.raises(DataError, match=r"holds a single \.npy array"):
        data.load_npz(str(tmp_path / "single.npy"))


# ---------------------------------------------------------------- raw float32 (onert_train)

def test_raw_one_hot_expected(tmp_path, digits):
    x = digits.data.astype(np.float32)
    onehot = np.eye(10, dtype=np.float32)[digits.target]
    data.save_raw(x, str(tmp_path / "in.bin"))
    data.save_raw(onehot, str(tmp_path / "exp.bin"))
    assert os.path.getsize(tmp_path / "in.bin") == 1797 * 64 * 4
    ds = data.load_raw(str(tmp_path / "in.bin"), str(tmp_path / "exp.bin"), [64], task="classification")
    np.testing.assert_array_equal(ds.x, x)
    np.testing.assert_array_equal(ds.y, digits.target)
    img = data.load_raw(str(tmp_path / "in.bin"), str(tmp_path / "exp.bin"), (1, 8, 8), [10])
    assert img.x.shape == (1797, 1, 8, 8) and img.task == "regression" and img.y.shape == (1797, 10)
    np.testing.assert_array_equal(img.y, onehot)
    # from bytes, class ids stored one float per sample
    ids = data.load_raw(x.tobytes(), digits.target.astype("<f4").tobytes(), [64], task="classification")
    np.testing.assert_array_equal(ids.y, digits.target)


def test_raw_errors(tmp_path, digits):
    x = digits.data[:10].astype("<f4").tobytes()
    y = np.eye(10, dtype="<f4")[digits.target[:10]].tobytes()
    with pytest.raises(DataError, match=r"in\.bin has 2560 bytes, not a multiple of 252 bytes \(one float32 sample of shape \[63\]\)"):
        data.load_raw(x, y, [63], input_name="in.bin")
    with pytest.raises(DataError, match=r"exp\.bin has 396 bytes, which does not split into 10 float32 samples"):
        data.load_raw(x, y[:-4], [64], expected_name="exp.bin")
    with pytest.raises(DataError, match=r"input holds 10 samples but exp\.bin holds 9"):
        data.load_raw(x, y[:-40], [64], [10], input_name="input", expected_name="exp.bin")
    soft = np.full((10, 10), 0.1, dtype="<f4").tobytes()
    with pytest.raises(DataError, match=r"sample 0: expected a one-hot vector of 10 classes"):
        data.load_raw(x, soft, [64], task="classification")
    with pytest.raises(DataError, match=r"input file '.*missing\.bin' does not exist"):
        data.load_raw(str(tmp_path / "missing.bin"), y, [64])


# ---------------------------------------------------------------- image folders

def _write_digit_pngs(root, digits, per_class=4, labels=(0, 1, 2)):
    from PIL import Image
    for lab in labels:
        os.makedirs(os.path.join(root, "digit{}".format(lab)))
        for k, i in enumerate(np.flatnonzero(digits.target == lab)[:per_class]):
            pixels = (digits.images[i] * 255 / 16).round().astype(np.uint8)
            Image.fromarray(pixels, mode="L").save(os.path.join(root, "digit{}".format(lab), "{}.png".format(k)))


def test_image_folder(tmp_path, digits):
    pytest.importorskip("PIL")
    root = str(tmp_path / "imgs")
    _write_digit_pngs(root, digits)
    with open(os.path.join(root, "digit0", "notes.txt"), "w") as f:
        f.write("skipped: not an image")
    ds = data.load_image_folder(root)
    assert ds.x.shape == (12, 1, 8, 8) and ds.x.dtype == np.float32
    assert ds.classes == ["digit0", "digit1", "digit2"]
    np.testing.assert_array_equal(ds.y, [0] * 4 + [1] * 4 + [2] * 4)
    first = np.flatnonzero(digits.target == 0)[0]
    expected = (digits.images[first] * 255 / 16).round().astype(np.uint8) / np.float32(255)
    np.testing.assert_allclose(ds.x[0, 0], expected, rtol=0, atol=1e-7)
    rgb = data.load_dataset(root, image_size=(16, 12), color="RGB")
    assert rgb.x.shape == (12, 3, 16, 12)
    assert rgb.x.min() >= 0.0 and rgb.x.max() <= 1.0
    np.testing.assert_array_equal(rgb.x[:, 0], rgb.x[:, 2])  # gray -> equal channels


def test_image_folder_errors(tmp_path, digits, monkeypatch):
    pytest.importorskip("PIL")
    root = str(tmp_path / "imgs")
    os.makedirs(root)
    with pytest.raises(DataError, match=r"has no class sub-folders"):
        data.load_image_folder(root)
    os.makedirs(os.path.join(root, "a"))
    with pytest.raises(DataError, match=r"no images found"):
        data.load_image_folder(root)
    with open(os.path.join(root, "a", "broken.png"), "wb") as f:
        f.write(b"not a png")
    with pytest.raises(DataError, match=r"image 'a/broken\.png' is not a readable image"):
        data.load_image_folder(root)
    with pytest.raises(DataError, match=r"color must be 'L' \(grayscale\) or 'RGB', got 'CMYK'"):
        data.load_image_folder(root, color="CMYK")

    from PIL import Image
    os.remove(os.path.join(root, "a", "broken.png"))
    Image.new("L", (8, 8)).save(os.path.join(root, "a", "small.png"))
    Image.new("L", (9, 8)).save(os.path.join(root, "a", "wide.png"))
    with pytest.raises(DataError, match=r"image 'a/wide\.png' is 9x8 \(width x height\) but 'a/small\.png' is 8x8; pass a size"):
        data.load_image_folder(root)

    real_import = builtins.__import__

    def no_pillow(name, *args, **kwargs):
        if name == "PIL" or name.startswith("PIL."):
            raise ImportError("no PIL here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pillow)
    with pytest.raises(DataError, match=r"reading images needs Pillow, which is not installed \(pip install pillow\)"):
        data.load_image_folder(root)


# ---------------------------------------------------------------- dispatch

def test_load_dataset_dispatch(tmp_path, iris_csv, digits):
    assert data.load_dataset(iris_csv, label="species").classes is not None
    np.savez(tmp_path / "d.npz", x=digits.data, y=digits.target)
    npz_bytes = (tmp_path / "d.npz").read_bytes()
    assert len(data.load_dataset(npz_bytes)) == 1797  # sniffed as zip
    assert len(data.load_dataset(str(tmp_path / "d.npz"))) == 1797
    raw = data.load_dataset(digits.data.astype("<f4").tobytes(),
                            expected=digits.target.astype("<f4").tobytes(), input_shape=[64],
                            task="classification")
    np.testing.assert_array_equal(raw.y, digits.target)
    with pytest.raises(DataError, match=r"raw input files need the per-sample input shape"):
        data.load_dataset(b"1234", expected=b"1234")
    with pytest.raises(DataError, match=r"looks like a raw float32 file"):
        data.load_dataset(str(tmp_path / "x.bin"))
    with pytest.raises(DataError, match=r"data file '.*what\.xyz' does not exist"):
        data.load_dataset(str(tmp_path / "what.xyz"))
    (tmp_path / "what.xyz").write_text("?")
    with pytest.raises(DataError, match=r"cannot tell the format of"):
        data.load_dataset(str(tmp_path / "what.xyz"))


# ---------------------------------------------------------------- shuffling, batching, splits

def test_epoch_order_is_a_function_of_seed_and_epoch():
    a = data.epoch_order(100, seed=7, epoch=3)
    assert sorted(a.tolist()) == list(range(100))
    np.testing.assert_array_equal(a, data.epoch_order(100, seed=7, epoch=3))
    assert not np.array_equal(a, data.epoch_order(100, seed=7, epoch=4))
    assert not np.array_equal(a, data.epoch_order(100, seed=8, epoch=3))
    with pytest.raises(DataError, match=r"seed must be an integer >= 0, got -1"):
        data.epoch_order(10, seed=-1, epoch=0)


def test_batches_cover_everything_with_partial_last():
    order = data.epoch_order(103, seed=0, epoch=0)
    parts = data.batch_indices(order, 10)
    assert [len(p) for p in parts] == [10] * 10 + [3]
    np.testing.assert_array_equal(np.concatenate(parts), order)
    assert data.num_batches(103, 10) == 11 and data.num_batches(103, 10, drop_last=True) == 10
    assert [len(p) for p in data.batch_indices(order, 10, drop_last=True)] == [10] * 10
    assert len(data.batch_indices(order, 500)) == 1
    x = np.arange(20, dtype=np.float32).reshape(10, 2)
    y = np.arange(10)
    got = list(data.iter_batches(x, y, 4, order=np.arange(10)[::-1]))
    assert [len(b[1]) for b in got] == [4, 4, 2]
    np.testing.assert_array_equal(got[0][1], [9, 8, 7, 6])
    np.testing.assert_array_equal(got[0][0], x[[9, 8, 7, 6]])
    with pytest.raises(DataError, match=r"batch size must be an integer >= 1, got 0"):
        data.batch_indices(order, 0)


def test_split_is_disjoint_deterministic_and_stratified(digits):
    n = len(digits.target)
    tr, va = data.split_indices(n, 0.2, seed=3)
    assert len(np.intersect1d(tr, va)) == 0
    np.testing.assert_array_equal(np.union1d(tr, va), np.arange(n))
    assert len(va) == round(n * 0.2)
    tr2, va2 = data.split_indices(n, 0.2, seed=3)
    np.testing.assert_array_equal(va, va2)
    assert not np.array_equal(va, data.split_indices(n, 0.2, seed=4)[1])
    # stratified: every class keeps ~20% on the validation side
    tr, va = data.split_indices(n, 0.2, seed=3, stratify=digits.target)
    assert len(np.intersect1d(tr, va)) == 0 and len(tr) + len(va) == n
    for c in range(10):
        members = np.sum(digits.target == c)
        assert abs(np.sum(digits.target[va] == c) - 0.2 * members) <= 1
    # tiny sets keep at least one sample on each side
    tr, va = data.split_indices(2, 0.01, seed=0)
    assert len(tr) == 1 and len(va) == 1
    tr, va = data.split_indices(4, 0.9, seed=0, stratify=np.array([0, 0, 1, 1]))
    assert len(tr) == 2 and len(va) == 2
    with pytest.raises(DataError, match=r"validation fraction must be between 0 and 1 \(exclusive\), got 1.5"):
        data.split_indices(10, 1.5, seed=0)
    with pytest.raises(DataError, match=r"cannot split 1 sample"):
        data.split_indices(1, 0.5, seed=0)


def test_dataset_subset(iris_csv):
    ds = data.load_csv(iris_csv, label="species")
    tr, va = data.split_indices(len(ds), 0.3, seed=1, stratify=ds.y)
    train, val = ds.subset(tr), ds.subset(va)
    assert len(train) + len(val) == 150 and train.classes == ds.classes
    assert train.sample_shape == (4,)


# ---------------------------------------------------------------- standardisation

def test_standardizer_fit_on_train_apply_to_val(iris_csv):
    ds = data.load_csv(iris_csv, label="species")
    tr, va = data.split_indices(len(ds), 0.25, seed=0)
    std = data.Standardizer.fit(ds.x[tr])
    xt = std.transform(ds.x[tr])
    assert xt.dtype == np.float32
    np.testing.assert_allclose(xt.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(xt.std(axis=0), 1, atol=1e-5)
    xv = std.transform(ds.x[va])
    expected = (ds.x[va].astype(np.float64) - ds.x[tr].mean(axis=0, dtype=np.float64)) / ds.x[tr].std(axis=0, dtype=np.float64)
    np.testing.assert_allclose(xv, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(std.inverse_transform(xv), ds.x[va], rtol=1e-5, atol=1e-5)
    again = data.Standardizer.from_json(std.to_json())
    np.testing.assert_array_equal(again.transform(ds.x[va]), xv)
    with pytest.raises(DataError, match=r"fitted on samples of shape \[4\], got \[3\]"):
        std.transform(ds.x[:, :3])
    with pytest.raises(DataError, match=r"malformed standardizer JSON"):
        data.Standardizer.from_json("{")


def test_standardizer_constant_column():
    x = np.array([[1.0, 5.0], [3.0, 5.0]], dtype=np.float32)
    out = data.Standardizer.fit(x).transform(x)
    np.testing.assert_array_equal(out, [[-1, 0], [1, 0]])
