"""Our numpy NMS against torchvision's reference, plus postprocess() on synthetic heads.

Box coordinates are whole pixels: torchvision's batched_nms offsets each class by
``class * (max_coord + 1)``, which is exact for integers but would re-round fractional
float32 coordinates and make IoUs differ in the last bit from any other implementation.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.inference.vision.postprocess import Detections, nms, pairwise_iou, postprocess, xywh_to_xyxy

pytestmark = pytest.mark.timeout(120)

HYP = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def box_sets(draw, max_boxes: int = 40, n_classes: int = 3, distinct_scores: bool = True,
             max_coord: int = 60, max_size: int = 40):
    n = draw(st.integers(0, max_boxes))
    coords = st.integers(0, max_coord)
    sizes = st.integers(1, max_size)
    boxes = []
    for _ in range(n):
        x, y, w, h = draw(coords), draw(coords), draw(sizes), draw(sizes)
        boxes.append([x, y, x + w, y + h])
    if distinct_scores:
        raw = draw(st.lists(st.integers(1, 10**6), min_size=n, max_size=n, unique=True))
        scores = np.array(raw, np.float32) / np.float32(10**6)
    else:
        scores = np.full(n, 0.5, np.float32)
    classes = draw(st.lists(st.integers(0, n_classes - 1), min_size=n, max_size=n))
    return (np.array(boxes, np.float32).reshape(-1, 4), scores.astype(np.float32),
            np.array(classes, np.int64))


iou_thresholds = st.floats(0.05, 0.95, allow_nan=False).map(lambda v: round(v, 3))


def reference(boxes, scores, classes, thr) -> np.ndarray:
    return torchvision.ops.batched_nms(torch.from_numpy(boxes), torch.from_numpy(scores),
                                       torch.from_numpy(classes), thr).numpy()


@HYP
@given(data=box_sets(), thr=iou_thresholds)
def test_same_kept_set_and_order_as_torchvision(data, thr):
    boxes, scores, classes = data
    ours = nms(boxes, scores, classes, thr)
    np.testing.assert_array_equal(ours, reference(boxes, scores, classes, thr))


@HYP
@given(data=box_sets(max_boxes=12, n_classes=1, max_coord=6, max_size=6),
       thr=st.sampled_from([0.2, 0.3, 0.4, 0.6, 0.7, 0.8]))
def test_threshold_matches_torchvision_at_exact_iou(data, thr):
    """Whole-pixel boxes often have an IoU of exactly 0.2, 0.3 or 0.4; the comparison must
    treat the threshold like torchvision (float32 IoU > float64 threshold)."""
    boxes, scores, classes = data
    np.testing.assert_array_equal(nms(boxes, scores, classes, thr), reference(boxes, scores, classes, thr))


def test_iou_exactly_at_a_non_binary_threshold():
    """inter 3 / union 10: the float32 IoU is 0.30000001, just above 0.3 in float64,
    so torchvision (and Ultralytics, which calls it) suppresses; so must we."""
    pair = np.array([[0, 0, 10, 1], [0, 0, 3, 1]], np.float32)
    scores, classes = np.array([0.9, 0.8], np.float32), np.zeros(2, np.int64)
    assert pairwise_iou(pair[:1], pair[1:])[0, 0] == np.float32(0.3)
    assert reference(pair, scores, classes, 0.3).tolist() == [0]
    assert nms(pair, scores, classes, 0.3).tolist() == [0]
    # at a threshold a float32 can hold exactly, an IoU equal to it is not "greater"
    half = np.array([[0, 0, 10, 1], [0, 0, 5, 1]], np.float32)
    assert nms(half, scores, classes, 0.5).tolist() == [0, 1] == reference(half, scores, classes, 0.5).tolist()


@HYP
@given(data=box_sets(), thr=iou_thresholds)
def test_greedy_invariants(data, thr):
    boxes, scores, classes = data
    keep = nms(boxes, scores, classes, thr)
    assert len(np.unique(keep)) == len(keep)
    # best score first
    assert np.all(np.diff(scores[keep]) <= 0)
    iou = pairwise_iou(boxes, boxes).astype(np.float64)  # compared with the float64 threshold
    kept = set(keep.tolist())
    # no two kept boxes of one class overlap by more than the threshold
    for i in keep:
        for j in keep:
            if i != j and classes[i] == classes[j]:
                assert iou[i, j] <= thr
    # every dropped box is explained by a better kept box of its own class
    for j in range(len(boxes)):
        if j not in kept:
            assert any(classes[i] == classes[j] and scores[i] > scores[j] and iou[i, j] > thr for i in kept)


@HYP
@given(data=box_sets(distinct_scores=False), thr=iou_thresholds)
def test_equal_scores_lower_index_wins_and_is_deterministic(data, thr):
    boxes, scores, classes = data
    first = nms(boxes, scores, classes, thr)
    for _ in range(3):
        np.testing.assert_array_equal(nms(boxes, scores, classes, thr), first)
    # all-equal scores must behave like scores falling with the index
    falling = (len(boxes) - np.arange(len(boxes))).astype(np.float32)
    np.testing.assert_array_equal(first, reference(boxes, falling, classes, thr))


def test_tie_between_identical_boxes_keeps_lower_index():
    boxes = np.array([[0, 0, 10, 10]] * 4, np.float32)
    scores = np.array([0.5, 0.9, 0.9, 0.9], np.float32)
    assert nms(boxes, scores, np.zeros(4, np.int64), 0.5).tolist() == [1]
    scores = np.full(4, 0.9, np.float32)
    assert nms(boxes, scores, np.zeros(4, np.int64), 0.5).tolist() == [0]
    # a different class is never suppressed
    assert nms(boxes, scores, np.array([1, 0, 1, 0]), 0.5).tolist() == [0, 1]


def test_chain_suppression_is_greedy_not_transitive():
    # A suppresses B, B would suppress C, but B is gone so C survives (needs >2 fixed-point steps)
    boxes = np.array([[0, 0, 10, 10], [4, 0, 14, 10], [8, 0, 18, 10], [12, 0, 22, 10]], np.float32)
    scores = np.array([0.9, 0.8, 0.7, 0.6], np.float32)
    keep = nms(boxes, scores, np.zeros(4, np.int64), 0.3)
    assert keep.tolist() == [0, 2] == reference(boxes, scores, np.zeros(4, np.int64), 0.3).tolist()


@pytest.mark.parametrize("n,width,thr", [(600, 10, 0.7), (600, 100, 0.7), (1000, 30, 0.5), (300, 7, 0.2)])
def test_long_suppression_chains_match_torchvision(n, width, thr):
    """Boxes shifted by one pixel each: keep/suppress alternates down a long chain."""
    x = np.arange(n, dtype=np.float32)
    boxes = np.stack([x, np.zeros(n, np.float32), x + width, np.full(n, 50, np.float32)], 1)
    scores = np.linspace(1, 0.01, n).astype(np.float32)
    classes = np.arange(n) % 2
    np.testing.assert_array_equal(nms(boxes, scores, classes, thr), reference(boxes, scores, classes, thr))


@HYP
@given(data=box_sets(max_coord=20, max_size=15), thr=iou_thresholds)
def test_sequential_fallback_matches_torchvision(data, thr):
    """Force the long-chain path (no fixed-point steps) on random sets."""
    from unittest import mock

    boxes, scores, classes = data
    with mock.patch("app.inference.vision.postprocess.MAX_FIXED_POINT_STEPS", 0):
        ours = nms(boxes, scores, classes, thr)
    np.testing.assert_array_equal(ours, reference(boxes, scores, classes, thr))


@pytest.mark.timeout(60)
def test_worst_case_chain_is_not_cubic():
    """4096 candidates (MAX_CANDIDATES) in one 2048-step chain: a fixed point iterated to
    the end takes thousands of O(n^2) steps (~20 s); the bound here is several times what
    the O(n^2) path needs on a busy 2-core runner."""
    import time

    from app.inference.vision.postprocess import MAX_CANDIDATES

    n = MAX_CANDIDATES
    x = np.arange(n, dtype=np.float32)
    boxes = np.stack([x, np.zeros(n, np.float32), x + 10, np.full(n, 100, np.float32)], 1)
    scores = np.linspace(1, 0.01, n).astype(np.float32)
    classes = np.zeros(n, np.int64)
    start = time.perf_counter()
    keep = nms(boxes, scores, classes, 0.7)
    elapsed = time.perf_counter() - start
    assert len(keep) == n // 2
    assert elapsed < 6.0, f"{elapsed:.2f}s"  # the cubic version took ~20 s here


def test_pairwise_iou_values():
    a = np.array([[0, 0, 10, 10], [5, 5, 6, 4]], np.float32)  # second is degenerate (h < 0)
    b = np.array([[5, 0, 15, 10], [20, 20, 30, 30], [0, 0, 10, 10]], np.float32)
    iou = pairwise_iou(a, b)
    np.testing.assert_allclose(iou[0], [50 / 150, 0, 1])
    np.testing.assert_array_equal(iou[1], [0, 0, 0])


def test_empty_input():
    assert nms(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64), 0.5).shape == (0,)


# --- postprocess on a synthetic head --------------------------------------------------------

NC = 4


def head(anchors: list[tuple[tuple[float, float, float, float], dict[int, float]]], nc: int = NC) -> np.ndarray:
    """(4+nc, A) head output from (xywh, {class: score}) per anchor."""
    pred = np.zeros((4 + nc, len(anchors)), np.float32)
    for a, (xywh, cls_scores) in enumerate(anchors):
        pred[:4, a] = xywh
        for c, s in cls_scores.items():
            pred[4 + c, a] = s
    return pred


def test_xywh_to_xyxy():
    np.testing.assert_allclose(xywh_to_xyxy(np.array([[50, 40, 20, 10]], np.float32)), [[40, 35, 60, 45]])


def test_conf_threshold_is_strict():
    pred = head([((10, 10, 4, 4), {0: 0.25}), ((50, 50, 4, 4), {1: 0.2501}), ((90, 90, 4, 4), {2: 0.1})])
    dets = postprocess(pred, conf=0.25)
    assert dets.class_ids.tolist() == [1]
    np.testing.assert_allclose(dets.boxes, [[48, 48, 52, 52]])
    assert dets.boxes.dtype == np.float32 and dets.class_ids.dtype == np.int64


def test_nothing_above_conf_is_empty():
    dets = postprocess(head([((10, 10, 4, 4), {0: 0.1})]), conf=0.25)
    assert isinstance(dets, Detections) and len(dets) == 0 and dets.boxes.shape == (0, 4)


def test_overlapping_same_class_suppressed_other_class_kept():
    pred = head([((10, 10, 10, 10), {0: 0.9}), ((11, 10, 10, 10), {0: 0.8}), ((11, 10, 10, 10), {1: 0.7})])
    dets = postprocess(pred, conf=0.25, iou=0.5)
    assert dets.class_ids.tolist() == [0, 1]
    np.testing.assert_allclose(dets.scores, [0.9, 0.7])


def test_max_det_keeps_the_best():
    pred = head([((20 * i + 10, 10, 8, 8), {i % NC: 0.3 + 0.05 * i}) for i in range(10)])
    assert len(postprocess(pred, conf=0.25)) == 10
    dets = postprocess(pred, conf=0.25, max_det=3)
    np.testing.assert_allclose(dets.scores, [0.75, 0.7, 0.65], rtol=1e-6)


def test_max_candidates_keeps_the_best_before_nms():
    pred = head([((20 * i + 10, 10, 8, 8), {0: 0.3 + 0.05 * i}) for i in range(10)])
    dets = postprocess(pred, conf=0.25, max_candidates=4)
    np.testing.assert_allclose(dets.scores, [0.75, 0.7, 0.65, 0.6], rtol=1e-6)


def test_class_filter():
    pred = head([((10, 10, 8, 8), {0: 0.9}), ((40, 10, 8, 8), {1: 0.8}), ((70, 10, 8, 8), {2: 0.7}),
                 ((100, 10, 8, 8), {3: 0.6})])
    assert postprocess(pred, classes=frozenset({1, 3})).class_ids.tolist() == [1, 3]
    assert postprocess(pred, classes=frozenset({2, 99, -1})).class_ids.tolist() == [2]
    assert len(postprocess(pred, classes=frozenset())) == 0


def test_class_filter_applies_after_best_class_like_ultralytics():
    """An anchor whose best class is filtered out contributes nothing: its second-best
    class must not surface (the filtered result is a subset of the unfiltered one)."""
    pred = head([((10, 10, 8, 8), {2: 0.9, 0: 0.6}), ((40, 10, 8, 8), {0: 0.5})])
    assert postprocess(pred).class_ids.tolist() == [2, 0]
    dets = postprocess(pred, classes=frozenset({0}))
    assert dets.class_ids.tolist() == [0]
    np.testing.assert_allclose(dets.boxes, [[36, 6, 44, 14]])
    # multi_label considers every class of every anchor, so there both person boxes count
    assert sorted(postprocess(pred, classes=frozenset({0}), multi_label=True).scores.tolist()) == \
        pytest.approx([0.5, 0.6])


@HYP
@given(seed=st.integers(0, 2**32 - 1), keep=st.sets(st.integers(0, NC - 1)))
def test_class_filter_is_subset_of_unfiltered(seed, keep):
    rng = np.random.default_rng(seed)
    a = 60
    pred = np.zeros((4 + NC, a), np.float32)
    pred[:2] = rng.integers(0, 100, (2, a))
    pred[2:4] = rng.integers(2, 40, (2, a))
    pred[4:] = rng.random((NC, a), dtype=np.float32)
    full = postprocess(pred, conf=0.3, iou=0.5, max_det=1000)
    sub = postprocess(pred, conf=0.3, iou=0.5, max_det=1000, classes=frozenset(keep))
    mask = np.isin(full.class_ids, list(keep))
    np.testing.assert_array_equal(sub.class_ids, full.class_ids[mask])
    np.testing.assert_array_equal(sub.boxes, full.boxes[mask])


def test_multi_label():
    # one anchor, two classes above conf, one below
    pred = head([((10, 10, 8, 8), {0: 0.8, 1: 0.6, 2: 0.2})])
    single = postprocess(pred, conf=0.25)
    assert single.class_ids.tolist() == [0]
    multi = postprocess(pred, conf=0.25, multi_label=True)
    assert multi.class_ids.tolist() == [0, 1]
    np.testing.assert_allclose(multi.scores, [0.8, 0.6])
    np.testing.assert_allclose(multi.boxes, [[6, 6, 14, 14]] * 2)


def test_multi_label_matches_ultralytics_nms():
    """Against Ultralytics' own non_max_suppression on a random head (val settings)."""
    from ultralytics.utils.nms import non_max_suppression

    rng = np.random.default_rng(7)
    a, nc = 400, 6
    pred = np.zeros((4 + nc, a), np.float32)
    pred[:2] = rng.integers(0, 300, (2, a))
    pred[2:4] = rng.integers(4, 80, (2, a))
    pred[4:] = rng.random((nc, a), dtype=np.float32) ** 3
    for multi in (False, True):
        ours = postprocess(pred, conf=0.2, iou=0.6, max_det=300, multi_label=multi)
        theirs = non_max_suppression(torch.from_numpy(pred)[None], conf_thres=0.2, iou_thres=0.6,
                                     multi_label=multi, max_det=300)[0].numpy()
        assert len(ours) == len(theirs) > 0
        order = np.lexsort((theirs[:, 5], -theirs[:, 4]))
        ours_order = np.lexsort((ours.class_ids, -ours.scores))
        np.testing.assert_allclose(ours.boxes[ours_order], theirs[order, :4], atol=1e-3)
        np.testing.assert_array_equal(ours.class_ids[ours_order], theirs[order, 5].astype(int))


def test_bad_head_shape_is_value_error():
    with pytest.raises(ValueError):
        postprocess(np.zeros((4, 10), np.float32))
    with pytest.raises(ValueError):
        postprocess(np.zeros((1, 84, 10), np.float32))
