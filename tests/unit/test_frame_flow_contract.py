"""The per-frame sequence exists once (app/flow/frame.py): no route, ingest feed or other
module runs one of its steps itself.

import-linter cannot forbid a call (and ``app.api`` rightly imports the engine's types), so
this reads the code: any use of an attribute named after a step (the engine's ``detect``, the
shadow lane's ``offer``, the rules' ``evaluate`` and ``accept_capture_time``), called or
passed on as ``run_in_executor(pool, rules.evaluate, ...)`` passes it, is a finding outside
the flow module and the short allow-list below of callers that are not the per-frame use case.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "app"
STEPS = frozenset({"detect", "offer", "evaluate", "accept_capture_time"})
FLOW = "app/flow/frame.py"
RULES_INTERNALS = "app/rules/"  # the rules' own chain (façade -> frames -> a camera's rules, replay, shards) ...
RULES_STEPS = frozenset({"evaluate", "accept_capture_time"})  # ... passes these two on, never the others
ALLOWED = {
    # offline tools run the pipeline over files (no engine, request, camera or rules)
    ("app/commands/detect.py", "pipeline.detect"),
    ("app/commands/parity.py", "pipeline.detect"),
    ("app/inference/accuracy.py", "pipeline.detect"),  # mAP over a labelled set ...
    ("app/inference/accuracy.py", "evaluator.evaluate"),  # ... scored by the COCO evaluator
    ("app/inference/precision/gate.py", "pipeline.detect"),  # the precision gate's comparison runs
    # a reader hands its frame to its camera's mailbox: a queue, not the shadow lane
    ("app/ingest/supervisor.py", "self.sender.offer"),
    # a rollout (app/flow/rollout.py): the flow's tap hands an answered frame to the rollout's comparator
    # (a bounded queue), which runs it on the other model's engine to compare the answers; its mAP check
    # runs the labelled set through both engines
    ("app/inference/shadow/candidate.py", "self.lane.offer"),
    ("app/inference/shadow/candidate.py", "engine.detect"),
    ("app/wiring/rollout.py", "self.engine.detect"),
    # benchmarks that time one step on its own
    ("app/tooling/bench/scale_rules.py", "rules.evaluate"),
    ("app/tooling/bench/shadow_ab.py", "engine.detect"),
    ("app/tooling/bench/shadow_ab.py", "lane.offer"),
}


def step_uses(source: str) -> list[tuple[int, str]]:
    """(line, expression) of every read of an attribute named after a step."""
    return sorted((node.lineno, ast.unparse(node)) for node in ast.walk(ast.parse(source))
                  if isinstance(node, ast.Attribute) and node.attr in STEPS and isinstance(node.ctx, ast.Load))


def findings(path: str, source: str) -> list[str]:
    if path == FLOW:
        return []
    own = RULES_STEPS if path.startswith(RULES_INTERNALS) else frozenset()
    return [f"{path}:{line}: {expr}" for line, expr in step_uses(source)
            if (path, expr) not in ALLOWED and expr.rsplit(".", 1)[1] not in own]


def sources() -> dict[str, str]:
    return {str(p.relative_to(REPO)): p.read_text() for p in sorted(APP.rglob("*.py"))}


def test_only_the_frame_flow_runs_the_per_frame_steps():
    found = [f for path, source in sources().items() for f in findings(path, source)]
    assert found == [], "run the frame through app.flow.frame.FrameFlow instead:\n" + "\n".join(found)


def test_the_check_catches_a_route_or_feed_that_runs_a_step_itself():
    route = ("async def detect(engine, rules, shadow, data, params):\n"
             "    result = await engine.detect(data, params)\n"
             "    shadow.offer(None, data, params, result.detections)\n"
             "    await loop.run_in_executor(engine.executor, rules.evaluate, 'cam', None, (1, 1), [])\n"
             "    return rules.accept_capture_time('cam', None)\n")
    assert findings("app/api/routes/detect.py", route) == [
        "app/api/routes/detect.py:2: engine.detect", "app/api/routes/detect.py:3: shadow.offer",
        "app/api/routes/detect.py:4: rules.evaluate", "app/api/routes/detect.py:5: rules.accept_capture_time"]
    feed = "async def feed(self, frame):\n    return await self.engine().detect(frame.rgb, self.params)\n"
    assert findings("app/ingest/embedded.py", feed) == ["app/ingest/embedded.py:2: self.engine().detect"]
    assert findings("app/flow/other.py", route) != []  # within the flow package too: one module runs the steps
    # the rules pass their own evaluate on (façade -> frames -> a camera), but never run the engine or the shadow lane
    assert findings("app/rules/service/frames.py", route) == [
        "app/rules/service/frames.py:2: engine.detect", "app/rules/service/frames.py:3: shadow.offer"]


def test_the_flow_module_runs_every_step_and_the_allow_list_is_not_stale():
    code = sources()
    assert {expr.rsplit(".", 1)[1] for _, expr in step_uses(code[FLOW])} == STEPS
    stale = sorted((path, expr) for path, expr in ALLOWED
                   if expr not in {e for _, e in step_uses(code.get(path, ""))})
    assert stale == [], f"allow-list entries no longer in the code: {stale}"
