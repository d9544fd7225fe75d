BEGIN TRANSACTION;
CREATE TABLE "events" (
   "run_id" TEXT,
   "sequence" INTEGER,
   "event_key" TEXT NOT NULL,
   "recorded_at" TEXT NOT NULL,
   "data" TEXT NOT NULL,
   PRIMARY KEY ("run_id", "sequence")
);
INSERT INTO "events" VALUES('v11-00',1,'run_started','2026-12-01T09:00:00.123456+00:00','{"spec": {"workflow": "order", "input": {"customer": "c0", "kind": "completes"}, "runtime_build_id": "lean-1", "patches": [], "parent_run_id": null, "parent_child_id": null, "predecessor_run_id": null, "attributes": {"customer": "c0"}}, "seed": "f8f8cec753a4636dbb087718bc1b354c"}');
INSERT INTO "events" VALUES('v11-00',2,'step_scheduled','2026-12-01T09:00:00.123456+00:00','{"step_id": "price", "name": "add", "input": 1, "retry": {"max_attempts": 3, "initial_interval": 1.0, "backoff_coefficient": 2.0, "max_interval": 60.0, "non_retryable": [], "on_exhausted": "terminate"}, "batch_id": null}');
INSERT INTO "events" VALUES('v11-00',3,'step_started','2026-12-01T09:00:00.124473+00:00','{"step_id": "price", "attempt": 1, "worker": "vm:10773:72a761", "lease_until": "2026-12-01T09:00:30.124473+00:00"}');
INSERT INTO "events" VALUES('v11-00',4,'step_completed','2026-12-01T09:00:00.124473+00:00','{"step_id": "price", "attempt": 1, "output": 2}');
INSERT INTO "events" VALUES('v11-00',5,'step_scheduled','2026-12-01T09:00:00.124473+00:00','{"step_id": "tax", "name": "add", "input": 2, "retry": {"max_attempts": 3, "initial_interval": 1.0, "backoff_coefficient": 2.0, "max_interval": 60.0, "non_retryable": [], "on_exhausted": "terminate"}, "batch_id": null}');
INSERT INTO "events" VALUES('v11-00',6,'step_started','2026-12-01T09:00:00.124473+00:00','{"step_id": "tax", "attempt": 1, "worker": "vm:10773:72a761", "lease_until": "2026-12-01T09:00:30.124473+00:00"}');
INSERT INTO "events" VALUES('v11-00',7,'step_completed','2026-12-01T09:00:00.124473+00:00','{"step_id": "tax", "attempt": 1, "output": 3}');
INSERT INTO "events" VALUES('v11-00',8,'step_scheduled','2026-12-01T09:00:00.124473+00:00','{"step_id": "charge", "name": "add", "input": 3, "retry": {"max_attempts": 3, "initial_interval": 1.0, "backoff_coefficient": 2.0, "max_interval": 60.0, "non_retryable": [], "on_exhausted": "terminate"}, "batch_id": null}');
INSERT INTO "events" VALUES('v11-00',9,'step_started','2026-12-01T09:00:00.124473+00:00','{"step_id": "charge", "attempt": 1, "worker": "vm:10773:72a761", "lease_until": "2026-12-01T09:00:30.124473+00:00"}');
INSERT INTO "events" VALUES('v11-00',10,'step_completed','2026-12-01T09:00:00.124473+00:00','{"step_id": "charge", "attempt": 1, "output": 4}');
INSERT INTO "events" VALUES('v11-00',11,'run_completed','2026-12-01T09:00:00.124473+00:00','{"result": 4}');
INSERT INTO "events" VALUES('v11-01',1,'run_started','2026-12-01T09:00:00.374476+00:00','{"spec": {"workflow": "order", "input": {"customer": "c1", "kind": "fails"}, "runtime_build_id": "lean-1", "patches": [], "parent_run_id": null, "parent_child_id": null, "predecessor_run_id": null, "attributes": {"customer": "c1"}}, "seed": "a5623e8ce2981e6ecc0f34e816c8cd5a"}');
INSERT INTO "events" VALUES('v11-01',2,'step_scheduled','2026-12-01T09:00:00.374476+00:00','{"step_id": "charge", "name": "decline", "input": null, "retry": {"max_attempts": 1, "initial_interval": 1.0, "backoff_coefficient": 2.0, "max_interval": 1.0, "non_retryable": [], "on_exhausted": "terminate"}, "batch_id": null}');
INSERT INTO "events" VALUES('v11-01',3,'step_started','2026-12-01T09:00:00.375493+00:00','{"step_id": "charge", "attempt": 1, "worker": "vm:10773:72a761", "lease_until": "2026-12-01T09:00:30.375493+00:00"}');
INSERT INTO "events" VALUES('v11-01',4,'step_failed','2026-12-01T09:00:00.375493+00:00','{"step_id": "charge", "attempt": 1, "error_type": "RuntimeError", "message": "card declined", "next_attempt_at": null, "exhausted": true, "traceback": "Traceback (most recent call last):\n  File \"/work/wt-eventrow/tests/lean_events_workflows.py\", line 53, in decline\n    raise RuntimeError(\"card declined\")\nRuntimeError: card declined\n"}');
INSERT INTO "events" VALUES('v11-01',5,'run_failed','2026-12-01T09:00:00.375493+00:00','{"error": {"type": "StepExhausted", "message": "step ''charge'' failed after 1 attempt(s)", "step_id": "charge", "step_error": {"type": "RuntimeError", "message": "card declined", "attempt": 1}}}');
INSERT INTO "events" VALUES('v11-02',1,'run_started','2026-12-01T09:00:00.625496+00:00','{"spec": {"workflow": "order", "input": {"customer": "c2", "kind": "waits"}, "runtime_build_id": "lean-1", "patches": [], "parent_run_id": null, "parent_child_id": null, "predecessor_run_id": null, "attributes": {"customer": "c2"}}, "seed": "6cbb0a58f9a84c024bbfcac400a84de4"}');
INSERT INTO "events" VALUES('v11-02',2,'signal_wait_started','2026-12-01T09:00:00.625496+00:00','{"wait_id": "approval", "signal_name": "approve"}');
INSERT INTO "events" VALUES('v11-03',1,'run_started','2026-12-01T09:00:00.876516+00:00','{"spec": {"workflow": "order", "input": {"customer": "c3", "kind": "sleeps"}, "runtime_build_id": "lean-1", "patches": [], "parent_run_id": null, "parent_child_id": null, "predecessor_run_id": null, "attributes": {"customer": "c3"}}, "seed": "3e47f04d0e678f35ceb2faca61e81fba"}');
INSERT INTO "events" VALUES('v11-03',2,'wait_started','2026-12-01T09:00:00.876516+00:00','{"wait_id": "cooling-off", "deadline": "2026-12-31T09:00:00.876516+00:00"}');
INSERT INTO "events" VALUES('v11-04',1,'run_started','2026-12-01T09:00:01.127536+00:00','{"spec": {"workflow": "order", "input": {"customer": "c4", "kind": "retries"}, "runtime_build_id": "lean-1", "patches": [], "parent_run_id": null, "parent_child_id": null, "predecessor_run_id": null, "attributes": {"customer": "c4"}}, "seed": "f100279d8feedbae699bc1c94ac00969"}');
INSERT INTO "events" VALUES('v11-04',2,'step_scheduled','2026-12-01T09:00:01.127536+00:00','{"step_id": "charge", "name": "decline", "input": null, "retry": {"max_attempts": 5, "initial_interval": 86400.0, "backoff_coefficient": 2.0, "max_interval": 86400.0, "non_retryable": [], "on_exhausted": "terminate"}, "batch_id": null}');
INSERT INTO "events" VALUES('v11-04',3,'step_started','2026-12-01T09:00:01.128553+00:00','{"step_id": "charge", "attempt": 1, "worker": "vm:10773:72a761", "lease_until": "2026-12-01T09:00:31.128553+00:00"}');
INSERT INTO "events" VALUES('v11-04',4,'step_failed','2026-12-01T09:00:01.128553+00:00','{"step_id": "charge", "attempt": 1, "error_type": "RuntimeError", "message": "card declined", "next_attempt_at": "2026-12-02T09:00:01.128553+00:00", "exhausted": false, "traceback": "Traceback (most recent call last):\n  File \"/work/wt-eventrow/tests/lean_events_workflows.py\", line 53, in decline\n    raise RuntimeError(\"card declined\")\nRuntimeError: card declined\n"}');
INSERT INTO "events" VALUES('v11-05',1,'run_started','2026-12-01T09:00:01.378556+00:00','{"spec": {"workflow": "order", "input": {"customer": "c5", "kind": "parent"}, "runtime_build_id": "lean-1", "patches": [], "parent_run_id": null, "parent_child_id": null, "predecessor_run_id": null, "attributes": {"customer": "c5"}}, "seed": "b0f5128916c4e344ff62f011d0be3b89"}');
INSERT INTO "events" VALUES('v11-05',2,'child_scheduled','2026-12-01T09:00:01.378556+00:00','{"child_id": "a", "child_run_id": "v11-05/a", "workflow": "item", "input": {"n": 1}, "cancellation": "cancel", "batch_id": null}');
INSERT INTO "events" VALUES('v11-05/a',1,'run_started','2026-12-01T09:00:01.378556+00:00','{"spec": {"workflow": "item", "input": {"n": 1}, "runtime_build_id": "lean-1", "patches": [], "parent_run_id": "v11-05", "parent_child_id": "a", "predecessor_run_id": null}, "seed": "3f4557abc8b48c6c66880351e8c76431"}');
INSERT INTO "events" VALUES('v11-05/a',2,'step_scheduled','2026-12-01T09:00:01.379573+00:00','{"step_id": "pick", "name": "add", "input": 1, "retry": {"max_attempts": 3, "initial_interval": 1.0, "backoff_coefficient": 2.0, "max_interval": 60.0, "non_retryable": [], "on_exhausted": "terminate"}, "batch_id": null}');
INSERT INTO "events" VALUES('v11-05/a',3,'step_started','2026-12-01T09:00:01.379573+00:00','{"step_id": "pick", "attempt": 1, "worker": "vm:10773:72a761", "lease_until": "2026-12-01T09:00:31.379573+00:00"}');
INSERT INTO "events" VALUES('v11-05/a',4,'step_completed','2026-12-01T09:00:01.379573+00:00','{"step_id": "pick", "attempt": 1, "output": 2}');
INSERT INTO "events" VALUES('v11-05/a',5,'run_completed','2026-12-01T09:00:01.379573+00:00','{"result": 2}');
INSERT INTO "events" VALUES('v11-05',3,'child_completed','2026-12-01T09:00:01.379573+00:00','{"child_id": "a", "child_run_id": "v11-05/a", "outcome": {"kind": "Completed", "result": 2}}');
INSERT INTO "events" VALUES('v11-05/b',1,'run_started','2026-12-01T09:00:01.379573+00:00','{"spec": {"workflow": "item", "input": {"n": 2}, "runtime_build_id": "lean-1", "patches": [], "parent_run_id": "v11-05", "parent_child_id": "b", "predecessor_run_id": null}, "seed": "76ca74657dc85f872e90a4919df46004"}');
INSERT INTO "events" VALUES('v11-05',4,'child_scheduled','2026-12-01T09:00:01.379573+00:00','{"child_id": "b", "child_run_id": "v11-05/b", "workflow": "item", "input": {"n": 2}, "cancellation": "cancel", "batch_id": null}');
INSERT INTO "events" VALUES('v11-05/b',2,'step_scheduled','2026-12-01T09:00:01.379573+00:00','{"step_id": "pick", "name": "add", "input": 2, "retry": {"max_attempts": 3, "initial_interval": 1.0, "backoff_coefficient": 2.0, "max_interval": 60.0, "non_retryable": [], "on_exhausted": "terminate"}, "batch_id": null}');
INSERT INTO "events" VALUES('v11-05/b',3,'step_started','2026-12-01T09:00:01.379573+00:00','{"step_id": "pick", "attempt": 1, "worker": "vm:10773:72a761", "lease_until": "2026-12-01T09:00:31.379573+00:00"}');
INSERT INTO "events" VALUES('v11-05/b',4,'step_completed','2026-12-01T09:00:01.379573+00:00','{"step_id": "pick", "attempt": 1, "output": 3}');
INSERT INTO "events" VALUES('v11-05/b',5,'run_completed','2026-12-01T09:00:01.379573+00:00','{"result": 3}');
INSERT INTO "events" VALUES('v11-05',5,'child_completed','2026-12-01T09:00:01.379573+00:00','{"child_id": "b", "child_run_id": "v11-05/b", "outcome": {"kind": "Completed", "result": 3}}');
INSERT INTO "events" VALUES('v11-05',6,'run_completed','2026-12-01T09:00:01.379573+00:00','{"result": [2, 3]}');
INSERT INTO "events" VALUES('v11-06',1,'run_started','2026-12-01T09:00:01.629576+00:00','{"spec": {"workflow": "order", "input": {"customer": "c6", "kind": "completes"}, "runtime_build_id": "lean-1", "patches": [], "parent_run_id": null, "parent_child_id": null, "predecessor_run_id": null, "attributes": {"customer": "c6"}}, "seed": "35708d7825d5d5ff0548070120626c0e"}');
INSERT INTO "events" VALUES('v11-06',2,'step_scheduled','2026-12-01T09:00:01.629576+00:00','{"step_id": "price", "name": "add", "input": 1, "retry": {"max_attempts": 3, "initial_interval": 1.0, "backoff_coefficient": 2.0, "max_interval": 60.0, "non_retryable": [], "on_exhausted": "terminate"}, "batch_id": null}');
INSERT INTO "events" VALUES('v11-06',3,'step_started','2026-12-01T09:00:01.630593+00:00','{"step_id": "price", "attempt": 1, "worker": "vm:10773:72a761", "lease_until": "2026-12-01T09:00:31.630593+00:00"}');
INSERT INTO "events" VALUES('v11-06',4,'step_completed','2026-12-01T09:00:01.630593+00:00','{"step_id": "price", "attempt": 1, "output": 2}');
INSERT INTO "events" VALUES('v11-06',5,'step_scheduled','2026-12-01T09:00:01.630593+00:00','{"step_id": "tax", "name": "add", "input": 2, "retry": {"max_attempts": 3, "initial_interval": 1.0, "backoff_coefficient": 2.0, "max_interval": 60.0, "non_retryable": [], "on_exhausted": "terminate"}, "batch_id": null}');
INSERT INTO "events" VALUES('v11-06',6,'step_started','2026-12-01T09:00:01.630593+00:00','{"step_id": "tax", "attempt": 1, "worker": "vm:10773:72a761", "lease_until": "2026-12-01T09:00:31.630593+00:00"}');
INSERT INTO "events" VALUES('v11-06',7,'step_completed','2026-12-01T09:00:01.630593+00:00','{"step_id": "tax", "attempt": 1, "output": 3}');
INSERT INTO "events" VALUES('v11-06',8,'step_scheduled','2026-12-01T09:00:01.630593+00:00','{"step_id": "charge", "name": "add", "input": 3, "retry": {"max_attempts": 3, "initial_interval": 1.0, "backoff_coefficient": 2.0, "max_interval": 60.0, "non_retryable": [], "on_exhausted": "terminate"}, "batch_id": null}');
INSERT INTO "events" VALUES('v11-06',9,'step_started','2026-12-01T09:00:01.630593+00:00','{"step_id": "charge", "attempt": 1, "worker": "vm:10773:72a761", "lease_until": "2026-12-01T09:00:31.630593+00:00"}');
INSERT INTO "events" VALUES('v11-06',10,'step_completed','2026-12-01T09:00:01.630593+00:00','{"step_id": "charge", "attempt": 1, "output": 4}');
INSERT INTO "events" VALUES('v11-06',11,'run_completed','2026-12-01T09:00:01.630593+00:00','{"result": 4}');
INSERT INTO "events" VALUES('v11-07',1,'run_started','2026-12-01T09:00:01.880596+00:00','{"spec": {"workflow": "order", "input": {"customer": "c7", "kind": "fails"}, "runtime_build_id": "lean-1", "patches": [], "parent_run_id": null, "parent_child_id": null, "predecessor_run_id": null, "attributes": {"customer": "c7"}}, "seed": "81a833da18a3dc80cfd63fc952738fdf"}');
INSERT INTO "events" VALUES('v11-07',2,'step_scheduled','2026-12-01T09:00:01.880596+00:00','{"step_id": "charge", "name": "decline", "input": null, "retry": {"max_attempts": 1, "initial_interval": 1.0, "backoff_coefficient": 2.0, "max_interval": 1.0, "non_retryable": [], "on_exhausted": "terminate"}, "batch_id": null}');
INSERT INTO "events" VALUES('v11-07',3,'step_started','2026-12-01T09:00:01.881613+00:00','{"step_id": "charge", "attempt": 1, "worker": "vm:10773:72a761", "lease_until": "2026-12-01T09:00:31.881613+00:00"}');
INSERT INTO "events" VALUES('v11-07',4,'step_failed','2026-12-01T09:00:01.881613+00:00','{"step_id": "charge", "attempt": 1, "error_type": "RuntimeError", "message": "card declined", "next_attempt_at": null, "exhausted": true, "traceback": "Traceback (most recent call last):\n  File \"/work/wt-eventrow/tests/lean_events_workflows.py\", line 53, in decline\n    raise RuntimeError(\"card declined\")\nRuntimeError: card declined\n"}');
INSERT INTO "events" VALUES('v11-07',5,'run_failed','2026-12-01T09:00:01.881613+00:00','{"error": {"type": "StepExhausted", "message": "step ''charge'' failed after 1 attempt(s)", "step_id": "charge", "step_error": {"type": "RuntimeError", "message": "card declined", "attempt": 1}}}');
INSERT INTO "events" VALUES('v11-08',1,'run_started','2026-12-01T09:00:02.131616+00:00','{"spec": {"workflow": "order", "input": {"customer": "c8", "kind": "waits"}, "runtime_build_id": "lean-1", "patches": [], "parent_run_id": null, "parent_child_id": null, "predecessor_run_id": null, "attributes": {"customer": "c8"}}, "seed": "83883154f72540bbe12bd991de3a9f3c"}');
INSERT INTO "events" VALUES('v11-08',2,'signal_wait_started','2026-12-01T09:00:02.131616+00:00','{"wait_id": "approval", "signal_name": "approve"}');
INSERT INTO "events" VALUES('v11-09',1,'run_started','2026-12-01T09:00:02.382636+00:00','{"spec": {"workflow": "order", "input": {"customer": "c9", "kind": "sleeps"}, "runtime_build_id": "lean-1", "patches": [], "parent_run_id": null, "parent_child_id": null, "predecessor_run_id": null, "attributes": {"customer": "c9"}}, "seed": "725d1cfeb1ac913630b56da32dceb69c"}');
INSERT INTO "events" VALUES('v11-09',2,'wait_started','2026-12-01T09:00:02.382636+00:00','{"wait_id": "cooling-off", "deadline": "2026-12-31T09:00:02.382636+00:00"}');
INSERT INTO "events" VALUES('v11-10',1,'run_started','2026-12-01T09:00:02.633656+00:00','{"spec": {"workflow": "order", "input": {"customer": "c10", "kind": "retries"}, "runtime_build_id": "lean-1", "patches": [], "parent_run_id": null, "parent_child_id": null, "predecessor_run_id": null, "attributes": {"customer": "c10"}}, "seed": "02b3c31ba1eb4202a675a9ba19b12d27"}');
INSERT INTO "events" VALUES('v11-10',2,'step_scheduled','2026-12-01T09:00:02.633656+00:00','{"step_id": "charge", "name": "decline", "input": null, "retry": {"max_attempts": 5, "initial_interval": 86400.0, "backoff_coefficient": 2.0, "max_interval": 86400.0, "non_retryable": [], "on_exhausted": "terminate"}, "batch_id": null}');
INSERT INTO "events" VALUES('v11-10',3,'step_started','2026-12-01T09:00:02.634673+00:00','{"step_id": "charge", "attempt": 1, "worker": "vm:10773:72a761", "lease_until": "2026-12-01T09:00:32.634673+00:00"}');
INSERT INTO "events" VALUES('v11-10',4,'step_failed','2026-12-01T09:00:02.634673+00:00','{"step_id": "charge", "attempt": 1, "error_type": "RuntimeError", "message": "card declined", "next_attempt_at": "2026-12-02T09:00:02.634673+00:00", "exhausted": false, "traceback": "Traceback (most recent call last):\n  File \"/work/wt-eventrow/tests/lean_events_workflows.py\", line 53, in decline\n    raise RuntimeError(\"card declined\")\nRuntimeError: card declined\n"}');
INSERT INTO "events" VALUES('v11-11',1,'run_started','2026-12-01T09:00:02.884676+00:00','{"spec": {"workflow": "order", "input": {"customer": "c11", "kind": "parent"}, "runtime_build_id": "lean-1", "patches": [], "parent_run_id": null, "parent_child_id": null, "predecessor_run_id": null, "attributes": {"customer": "c11"}}, "seed": "9bfe4c30eebc0243c9adc5941526413d"}');
INSERT INTO "events" VALUES('v11-11',2,'child_scheduled','2026-12-01T09:00:02.884676+00:00','{"child_id": "a", "child_run_id": "v11-11/a", "workflow": "item", "input": {"n": 1}, "cancellation": "cancel", "batch_id": null}');
INSERT INTO "events" VALUES('v11-11/a',1,'run_started','2026-12-01T09:00:02.884676+00:00','{"spec": {"workflow": "item", "input": {"n": 1}, "runtime_build_id": "lean-1", "patches": [], "parent_run_id": "v11-11", "parent_child_id": "a", "predecessor_run_id": null}, "seed": "d06347f5105ba62df063d2dd7b4271a5"}');
INSERT INTO "events" VALUES('v11-11/a',2,'step_scheduled','2026-12-01T09:00:02.885693+00:00','{"step_id": "pick", "name": "add", "input": 1, "retry": {"max_attempts": 3, "initial_interval": 1.0, "backoff_coefficient": 2.0, "max_interval": 60.0, "non_retryable": [], "on_exhausted": "terminate"}, "batch_id": null}');
INSERT INTO "events" VALUES('v11-11/a',3,'step_started','2026-12-01T09:00:02.885693+00:00','{"step_id": "pick", "attempt": 1, "worker": "vm:10773:72a761", "lease_until": "2026-12-01T09:00:32.885693+00:00"}');
INSERT INTO "events" VALUES('v11-11/a',4,'step_completed','2026-12-01T09:00:02.885693+00:00','{"step_id": "pick", "attempt": 1, "output": 2}');
INSERT INTO "events" VALUES('v11-11/a',5,'run_completed','2026-12-01T09:00:02.885693+00:00','{"result": 2}');
INSERT INTO "events" VALUES('v11-11',3,'child_completed','2026-12-01T09:00:02.885693+00:00','{"child_id": "a", "child_run_id": "v11-11/a", "outcome": {"kind": "Completed", "result": 2}}');
INSERT INTO "events" VALUES('v11-11/b',1,'run_started','2026-12-01T09:00:02.885693+00:00','{"spec": {"workflow": "item", "input": {"n": 2}, "runtime_build_id": "lean-1", "patches": [], "parent_run_id": "v11-11", "parent_child_id": "b", "predecessor_run_id": null}, "seed": "457aa16b83b5e57ae2de54f4f076eb6d"}');
INSERT INTO "events" VALUES('v11-11',4,'child_scheduled','2026-12-01T09:00:02.885693+00:00','{"child_id": "b", "child_run_id": "v11-11/b", "workflow": "item", "input": {"n": 2}, "cancellation": "cancel", "batch_id": null}');
INSERT INTO "events" VALUES('v11-11/b',2,'step_scheduled','2026-12-01T09:00:02.885693+00:00','{"step_id": "pick", "name": "add", "input": 2, "retry": {"max_attempts": 3, "initial_interval": 1.0, "backoff_coefficient": 2.0, "max_interval": 60.0, "non_retryable": [], "on_exhausted": "terminate"}, "batch_id": null}');
INSERT INTO "events" VALUES('v11-11/b',3,'step_started','2026-12-01T09:00:02.885693+00:00','{"step_id": "pick", "attempt": 1, "worker": "vm:10773:72a761", "lease_until": "2026-12-01T09:00:32.885693+00:00"}');
INSERT INTO "events" VALUES('v11-11/b',4,'step_completed','2026-12-01T09:00:02.885693+00:00','{"step_id": "pick", "attempt": 1, "output": 3}');
INSERT INTO "events" VALUES('v11-11/b',5,'run_completed','2026-12-01T09:00:02.885693+00:00','{"result": 3}');
INSERT INTO "events" VALUES('v11-11',5,'child_completed','2026-12-01T09:00:02.885693+00:00','{"child_id": "b", "child_run_id": "v11-11/b", "outcome": {"kind": "Completed", "result": 3}}');
INSERT INTO "events" VALUES('v11-11',6,'run_completed','2026-12-01T09:00:02.885693+00:00','{"result": [2, 3]}');
INSERT INTO "events" VALUES('v11-12',1,'run_started','2026-12-01T09:00:03.135696+00:00','{"spec": {"workflow": "order", "input": {"customer": "c12", "kind": "completes"}, "runtime_build_id": "lean-1", "patches": [], "parent_run_id": null, "parent_child_id": null, "predecessor_run_id": null, "attributes": {"customer": "c12"}}, "seed": "f21c59648c3c134eaf9903004a68d235"}');
INSERT INTO "events" VALUES('v11-12',2,'step_scheduled','2026-12-01T09:00:03.135696+00:00','{"step_id": "price", "name": "add", "input": 1, "retry": {"max_attempts": 3, "initial_interval": 1.0, "backoff_coefficient": 2.0, "max_interval": 60.0, "non_retryable": [], "on_exhausted": "terminate"}, "batch_id": null}');
INSERT INTO "events" VALUES('v11-12',3,'step_started','2026-12-01T09:00:03.136713+00:00','{"step_id": "price", "attempt": 1, "worker": "vm:10773:72a761", "lease_until": "2026-12-01T09:00:33.136713+00:00"}');
INSERT INTO "events" VALUES('v11-12',4,'step_completed','2026-12-01T09:00:03.136713+00:00','{"step_id": "price", "attempt": 1, "output": 2}');
INSERT INTO "events" VALUES('v11-12',5,'step_scheduled','2026-12-01T09:00:03.136713+00:00','{"step_id": "tax", "name": "add", "input": 2, "retry": {"max_attempts": 3, "initial_interval": 1.0, "backoff_coefficient": 2.0, "max_interval": 60.0, "non_retryable": [], "on_exhausted": "terminate"}, "batch_id": null}');
INSERT INTO "events" VALUES('v11-12',6,'step_started','2026-12-01T09:00:03.136713+00:00','{"step_id": "tax", "attempt": 1, "worker": "vm:10773:72a761", "lease_until": "2026-12-01T09:00:33.136713+00:00"}');
INSERT INTO "events" VALUES('v11-12',7,'step_completed','2026-12-01T09:00:03.136713+00:00','{"step_id": "tax", "attempt": 1, "output": 3}');
INSERT INTO "events" VALUES('v11-12',8,'step_scheduled','2026-12-01T09:00:03.136713+00:00','{"step_id": "charge", "name": "add", "input": 3, "retry": {"max_attempts": 3, "initial_interval": 1.0, "backoff_coefficient": 2.0, "max_interval": 60.0, "non_retryable": [], "on_exhausted": "terminate"}, "batch_id": null}');
INSERT INTO "events" VALUES('v11-12',9,'step_started','2026-12-01T09:00:03.136713+00:00','{"step_id": "charge", "attempt": 1, "worker": "vm:10773:72a761", "lease_until": "2026-12-01T09:00:33.136713+00:00"}');
INSERT INTO "events" VALUES('v11-12',10,'step_completed','2026-12-01T09:00:03.136713+00:00','{"step_id": "charge", "attempt": 1, "output": 4}');
INSERT INTO "events" VALUES('v11-12',11,'run_completed','2026-12-01T09:00:03.136713+00:00','{"result": 4}');
INSERT INTO "events" VALUES('v11-13',1,'run_started','2026-12-01T09:00:03.386716+00:00','{"spec": {"workflow": "order", "input": {"customer": "c13", "kind": "fails"}, "runtime_build_id": "lean-1", "patches": [], "parent_run_id": null, "parent_child_id": null, "predecessor_run_id": null, "attributes": {"customer": "c13"}}, "seed": "95f9cc1770e477ab31b0a70f059b6d0a"}');
INSERT INTO "events" VALUES('v11-13',2,'step_scheduled','2026-12-01T09:00:03.386716+00:00','{"step_id": "charge", "name": "decline", "input": null, "retry": {"max_attempts": 1, "initial_interval": 1.0, "backoff_coefficient": 2.0, "max_interval": 1.0, "non_retryable": [], "on_exhausted": "terminate"}, "batch_id": null}');
INSERT INTO "events" VALUES('v11-13',3,'step_started','2026-12-01T09:00:03.387733+00:00','{"step_id": "charge", "attempt": 1, "worker": "vm:10773:72a761", "lease_until": "2026-12-01T09:00:33.387733+00:00"}');
INSERT INTO "events" VALUES('v11-13',4,'step_failed','2026-12-01T09:00:03.387733+00:00','{"step_id": "charge", "attempt": 1, "error_type": "RuntimeError", "message": "card declined", "next_attempt_at": null, "exhausted": true, "traceback": "Traceback (most recent call last):\n  File \"/work/wt-eventrow/tests/lean_events_workflows.py\", line 53, in decline\n    raise RuntimeError(\"card declined\")\nRuntimeError: card declined\n"}');
INSERT INTO "events" VALUES('v11-13',5,'run_failed','2026-12-01T09:00:03.387733+00:00','{"error": {"type": "StepExhausted", "message": "step ''charge'' failed after 1 attempt(s)", "step_id": "charge", "step_error": {"type": "RuntimeError", "message": "card declined", "attempt": 1}}}');
INSERT INTO "events" VALUES('v11-14',1,'run_started','2026-12-01T09:00:03.637736+00:00','{"spec": {"workflow": "order", "input": {"customer": "c14", "kind": "waits"}, "runtime_build_id": "lean-1", "patches": [], "parent_run_id": null, "parent_child_id": null, "predecessor_run_id": null, "attributes": {"customer": "c14"}}, "seed": "e3b80857105838c41f8ed27e3d155f63"}');
INSERT INTO "events" VALUES('v11-14',2,'signal_wait_started','2026-12-01T09:00:03.637736+00:00','{"wait_id": "approval", "signal_name": "approve"}');
INSERT INTO "events" VALUES('v11-15',1,'run_started','2026-12-01T09:00:03.888756+00:00','{"spec": {"workflow": "order", "input": {"customer": "c15", "kind": "sleeps"}, "runtime_build_id": "lean-1", "patches": [], "parent_run_id": null, "parent_child_id": null, "predecessor_run_id": null, "attributes": {"customer": "c15"}}, "seed": "31c693f5cc3cf59babc9c08327b856c2"}');
INSERT INTO "events" VALUES('v11-15',2,'wait_started','2026-12-01T09:00:03.888756+00:00','{"wait_id": "cooling-off", "deadline": "2026-12-31T09:00:03.888756+00:00"}');
INSERT INTO "events" VALUES('v11-16',1,'run_started','2026-12-01T09:00:04.139776+00:00','{"spec": {"workflow": "order", "input": {"customer": "c16", "kind": "retries"}, "runtime_build_id": "lean-1", "patches": [], "parent_run_id": null, "parent_child_id": null, "predecessor_run_id": null, "attributes": {"customer": "c16"}}, "seed": "6988e4352e3c9679f0734b1067852a23"}');
INSERT INTO "events" VALUES('v11-16',2,'step_scheduled','2026-12-01T09:00:04.139776+00:00','{"step_id": "charge", "name": "decline", "input": null, "retry": {"max_attempts": 5, "initial_interval": 86400.0, "backoff_coefficient": 2.0, "max_interval": 86400.0, "non_retryable": [], "on_exhausted": "terminate"}, "batch_id": null}');
INSERT INTO "events" VALUES('v11-16',3,'step_started','2026-12-01T09:00:04.140793+00:00','{"step_id": "charge", "attempt": 1, "worker": "vm:10773:72a761", "lease_until": "2026-12-01T09:00:34.140793+00:00"}');
INSERT INTO "events" VALUES('v11-16',4,'step_failed','2026-12-01T09:00:04.140793+00:00','{"step_id": "charge", "attempt": 1, "error_type": "RuntimeError", "message": "card declined", "next_attempt_at": "2026-12-02T09:00:04.140793+00:00", "exhausted": false, "traceback": "Traceback (most recent call last):\n  File \"/work/wt-eventrow/tests/lean_events_workflows.py\", line 53, in decline\n    raise RuntimeError(\"card declined\")\nRuntimeError: card declined\n"}');
INSERT INTO "events" VALUES('v11-17',1,'run_started','2026-12-01T09:00:04.390796+00:00','{"spec": {"workflow": "order", "input": {"customer": "c17", "kind": "parent"}, "runtime_build_id": "lean-1", "patches": [], "parent_run_id": null, "parent_child_id": null, "predecessor_run_id": null, "attributes": {"customer": "c17"}}, "seed": "30b9a1303d46702e0de8353abe05770a"}');
INSERT INTO "events" VALUES('v11-17',2,'child_scheduled','2026-12-01T09:00:04.390796+00:00','{"child_id": "a", "child_run_id": "v11-17/a", "workflow": "item", "input": {"n": 1}, "cancellation": "cancel", "batch_id": null}');
INSERT INTO "events" VALUES('v11-17/a',1,'run_started','2026-12-01T09:00:04.390796+00:00','{"spec": {"workflow": "item", "input": {"n": 1}, "runtime_build_id": "lean-1", "patches": [], "parent_run_id": "v11-17", "parent_child_id": "a", "predecessor_run_id": null}, "seed": "dc275e4addfd2b700614fd5be1f0f0ff"}');
INSERT INTO "events" VALUES('v11-17/a',2,'step_scheduled','2026-12-01T09:00:04.391813+00:00','{"step_id": "pick", "name": "add", "input": 1, "retry": {"max_attempts": 3, "initial_interval": 1.0, "backoff_coefficient": 2.0, "max_interval": 60.0, "non_retryable": [], "on_exhausted": "terminate"}, "batch_id": null}');
INSERT INTO "events" VALUES('v11-17/a',3,'step_started','2026-12-01T09:00:04.391813+00:00','{"step_id": "pick", "attempt": 1, "worker": "vm:10773:72a761", "lease_until": "2026-12-01T09:00:34.391813+00:00"}');
INSERT INTO "events" VALUES('v11-17/a',4,'step_completed','2026-12-01T09:00:04.391813+00:00','{"step_id": "pick", "attempt": 1, "output": 2}');
INSERT INTO "events" VALUES('v11-17/a',5,'run_completed','2026-12-01T09:00:04.391813+00:00','{"result": 2}');
INSERT INTO "events" VALUES('v11-17',3,'child_completed','2026-12-01T09:00:04.391813+00:00','{"child_id": "a", "child_run_id": "v11-17/a", "outcome": {"kind": "Completed", "result": 2}}');
INSERT INTO "events" VALUES('v11-17/b',1,'run_started','2026-12-01T09:00:04.391813+00:00','{"spec": {"workflow": "item", "input": {"n": 2}, "runtime_build_id": "lean-1", "patches": [], "parent_run_id": "v11-17", "parent_child_id": "b", "predecessor_run_id": null}, "seed": "81caf362b7106fccf7362d63d54e5224"}');
INSERT INTO "events" VALUES('v11-17',4,'child_scheduled','2026-12-01T09:00:04.391813+00:00','{"child_id": "b", "child_run_id": "v11-17/b", "workflow": "item", "input": {"n": 2}, "cancellation": "cancel", "batch_id": null}');
INSERT INTO "events" VALUES('v11-17/b',2,'step_scheduled','2026-12-01T09:00:04.391813+00:00','{"step_id": "pick", "name": "add", "input": 2, "retry": {"max_attempts": 3, "initial_interval": 1.0, "backoff_coefficient": 2.0, "max_interval": 60.0, "non_retryable": [], "on_exhausted": "terminate"}, "batch_id": null}');
INSERT INTO "events" VALUES('v11-17/b',3,'step_started','2026-12-01T09:00:04.391813+00:00','{"step_id": "pick", "attempt": 1, "worker": "vm:10773:72a761", "lease_until": "2026-12-01T09:00:34.391813+00:00"}');
INSERT INTO "events" VALUES('v11-17/b',4,'step_completed','2026-12-01T09:00:04.391813+00:00','{"step_id": "pick", "attempt": 1, "output": 3}');
INSERT INTO "events" VALUES('v11-17/b',5,'run_completed','2026-12-01T09:00:04.391813+00:00','{"result": 3}');
INSERT INTO "events" VALUES('v11-17',5,'child_completed','2026-12-01T09:00:04.391813+00:00','{"child_id": "b", "child_run_id": "v11-17/b", "outcome": {"kind": "Completed", "result": 3}}');
INSERT INTO "events" VALUES('v11-17',6,'run_completed','2026-12-01T09:00:04.391813+00:00','{"result": [2, 3]}');
CREATE TABLE "flow_meta" (
   "key" TEXT PRIMARY KEY,
   "value" TEXT NOT NULL
);
INSERT INTO "flow_meta" VALUES('schema_version','11');
CREATE TABLE "hooks" (
   "token" TEXT PRIMARY KEY,
   "run_id" TEXT NOT NULL,
   "hook_id" TEXT NOT NULL,
   "resolved" INTEGER NOT NULL
, created_at TEXT, metadata TEXT);
CREATE TABLE leases (name TEXT PRIMARY KEY, owner TEXT NOT NULL, held_until TEXT NOT NULL);
CREATE TABLE limit_starts (name TEXT NOT NULL, started_at TEXT NOT NULL);
CREATE TABLE limits (kind TEXT NOT NULL, name TEXT NOT NULL, code_concurrency INTEGER, code_rate TEXT, code_rate_count INTEGER, code_rate_seconds INTEGER, code_key TEXT, overridden INTEGER NOT NULL DEFAULT 0, concurrency INTEGER, rate_count INTEGER, rate_seconds INTEGER, limited INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (kind, name));
INSERT INTO "limits" VALUES('step','add',NULL,NULL,NULL,NULL,NULL,0,NULL,NULL,NULL,0);
INSERT INTO "limits" VALUES('step','decline',NULL,NULL,NULL,NULL,NULL,0,NULL,NULL,NULL,0);
INSERT INTO "limits" VALUES('workflow','item',NULL,NULL,NULL,NULL,NULL,0,NULL,NULL,NULL,0);
INSERT INTO "limits" VALUES('workflow','order',NULL,NULL,NULL,NULL,NULL,0,NULL,NULL,NULL,0);
CREATE TABLE pauses (kind TEXT NOT NULL, name TEXT NOT NULL, reason TEXT, paused_at TEXT NOT NULL, PRIMARY KEY (kind, name));
CREATE TABLE run_attributes (run_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (run_id, key)) WITHOUT ROWID;
INSERT INTO "run_attributes" VALUES('v11-00','customer','"c0"');
INSERT INTO "run_attributes" VALUES('v11-01','customer','"c1"');
INSERT INTO "run_attributes" VALUES('v11-10','customer','"c10"');
INSERT INTO "run_attributes" VALUES('v11-11','customer','"c11"');
INSERT INTO "run_attributes" VALUES('v11-12','customer','"c12"');
INSERT INTO "run_attributes" VALUES('v11-13','customer','"c13"');
INSERT INTO "run_attributes" VALUES('v11-14','customer','"c14"');
INSERT INTO "run_attributes" VALUES('v11-15','customer','"c15"');
INSERT INTO "run_attributes" VALUES('v11-16','customer','"c16"');
INSERT INTO "run_attributes" VALUES('v11-17','customer','"c17"');
INSERT INTO "run_attributes" VALUES('v11-02','customer','"c2"');
INSERT INTO "run_attributes" VALUES('v11-03','customer','"c3"');
INSERT INTO "run_attributes" VALUES('v11-04','customer','"c4"');
INSERT INTO "run_attributes" VALUES('v11-05','customer','"c5"');
INSERT INTO "run_attributes" VALUES('v11-06','customer','"c6"');
INSERT INTO "run_attributes" VALUES('v11-07','customer','"c7"');
INSERT INTO "run_attributes" VALUES('v11-08','customer','"c8"');
INSERT INTO "run_attributes" VALUES('v11-09','customer','"c9"');
CREATE TABLE run_slots (run_id TEXT PRIMARY KEY, workflow TEXT NOT NULL, key TEXT NOT NULL, admitted INTEGER NOT NULL DEFAULT 0);
CREATE TABLE "runs" (
   "run_id" TEXT PRIMARY KEY,
   "workflow" TEXT NOT NULL,
   "status" TEXT NOT NULL,
   "build_id" TEXT NOT NULL,
   "parent_run_id" TEXT,
   "created_at" TEXT NOT NULL,
   "updated_at" TEXT NOT NULL,
   "last_sequence" INTEGER NOT NULL,
   "decide_at" TEXT,
   "lease_owner" TEXT,
   "failing" TEXT
, waiting_on TEXT, patches TEXT, failing_since TEXT, error_type TEXT, error TEXT, priority INTEGER NOT NULL DEFAULT 5);
INSERT INTO "runs" VALUES('v11-00','order','Completed','lean-1',NULL,'2026-12-01T09:00:00.123456+00:00','2026-12-01T09:00:00.124473+00:00',11,NULL,NULL,NULL,NULL,'[]',NULL,NULL,NULL,5);
INSERT INTO "runs" VALUES('v11-01','order','Failed','lean-1',NULL,'2026-12-01T09:00:00.374476+00:00','2026-12-01T09:00:00.375493+00:00',5,NULL,NULL,NULL,NULL,'[]',NULL,'RuntimeError','RuntimeError: card declined (step ''charge'' failed after 1 attempt(s))',5);
INSERT INTO "runs" VALUES('v11-02','order','Suspended','lean-1',NULL,'2026-12-01T09:00:00.625496+00:00','2026-12-01T09:00:00.625496+00:00',2,NULL,NULL,NULL,'signal:approve','[]',NULL,NULL,NULL,5);
INSERT INTO "runs" VALUES('v11-03','order','Suspended','lean-1',NULL,'2026-12-01T09:00:00.876516+00:00','2026-12-01T09:00:00.876516+00:00',2,'2026-12-31T09:00:00.876516+00:00',NULL,NULL,'timer:cooling-off','[]',NULL,NULL,NULL,5);
INSERT INTO "runs" VALUES('v11-04','order','Suspended','lean-1',NULL,'2026-12-01T09:00:01.127536+00:00','2026-12-01T09:00:01.128553+00:00',4,NULL,NULL,NULL,'step:charge','[]',NULL,NULL,NULL,5);
INSERT INTO "runs" VALUES('v11-05','order','Completed','lean-1',NULL,'2026-12-01T09:00:01.378556+00:00','2026-12-01T09:00:01.379573+00:00',6,NULL,NULL,NULL,NULL,'[]',NULL,NULL,NULL,5);
INSERT INTO "runs" VALUES('v11-05/a','item','Completed','lean-1','v11-05','2026-12-01T09:00:01.378556+00:00','2026-12-01T09:00:01.379573+00:00',5,NULL,NULL,NULL,NULL,'[]',NULL,NULL,NULL,5);
INSERT INTO "runs" VALUES('v11-05/b','item','Completed','lean-1','v11-05','2026-12-01T09:00:01.379573+00:00','2026-12-01T09:00:01.379573+00:00',5,NULL,NULL,NULL,NULL,'[]',NULL,NULL,NULL,5);
INSERT INTO "runs" VALUES('v11-06','order','Completed','lean-1',NULL,'2026-12-01T09:00:01.629576+00:00','2026-12-01T09:00:01.630593+00:00',11,NULL,NULL,NULL,NULL,'[]',NULL,NULL,NULL,5);
INSERT INTO "runs" VALUES('v11-07','order','Failed','lean-1',NULL,'2026-12-01T09:00:01.880596+00:00','2026-12-01T09:00:01.881613+00:00',5,NULL,NULL,NULL,NULL,'[]',NULL,'RuntimeError','RuntimeError: card declined (step ''charge'' failed after 1 attempt(s))',5);
INSERT INTO "runs" VALUES('v11-08','order','Suspended','lean-1',NULL,'2026-12-01T09:00:02.131616+00:00','2026-12-01T09:00:02.131616+00:00',2,NULL,NULL,NULL,'signal:approve','[]',NULL,NULL,NULL,5);
INSERT INTO "runs" VALUES('v11-09','order','Suspended','lean-1',NULL,'2026-12-01T09:00:02.382636+00:00','2026-12-01T09:00:02.382636+00:00',2,'2026-12-31T09:00:02.382636+00:00',NULL,NULL,'timer:cooling-off','[]',NULL,NULL,NULL,5);
INSERT INTO "runs" VALUES('v11-10','order','Suspended','lean-1',NULL,'2026-12-01T09:00:02.633656+00:00','2026-12-01T09:00:02.634673+00:00',4,NULL,NULL,NULL,'step:charge','[]',NULL,NULL,NULL,5);
INSERT INTO "runs" VALUES('v11-11','order','Completed','lean-1',NULL,'2026-12-01T09:00:02.884676+00:00','2026-12-01T09:00:02.885693+00:00',6,NULL,NULL,NULL,NULL,'[]',NULL,NULL,NULL,5);
INSERT INTO "runs" VALUES('v11-11/a','item','Completed','lean-1','v11-11','2026-12-01T09:00:02.884676+00:00','2026-12-01T09:00:02.885693+00:00',5,NULL,NULL,NULL,NULL,'[]',NULL,NULL,NULL,5);
INSERT INTO "runs" VALUES('v11-11/b','item','Completed','lean-1','v11-11','2026-12-01T09:00:02.885693+00:00','2026-12-01T09:00:02.885693+00:00',5,NULL,NULL,NULL,NULL,'[]',NULL,NULL,NULL,5);
INSERT INTO "runs" VALUES('v11-12','order','Completed','lean-1',NULL,'2026-12-01T09:00:03.135696+00:00','2026-12-01T09:00:03.136713+00:00',11,NULL,NULL,NULL,NULL,'[]',NULL,NULL,NULL,5);
INSERT INTO "runs" VALUES('v11-13','order','Failed','lean-1',NULL,'2026-12-01T09:00:03.386716+00:00','2026-12-01T09:00:03.387733+00:00',5,NULL,NULL,NULL,NULL,'[]',NULL,'RuntimeError','RuntimeError: card declined (step ''charge'' failed after 1 attempt(s))',5);
INSERT INTO "runs" VALUES('v11-14','order','Suspended','lean-1',NULL,'2026-12-01T09:00:03.637736+00:00','2026-12-01T09:00:03.637736+00:00',2,NULL,NULL,NULL,'signal:approve','[]',NULL,NULL,NULL,5);
INSERT INTO "runs" VALUES('v11-15','order','Suspended','lean-1',NULL,'2026-12-01T09:00:03.888756+00:00','2026-12-01T09:00:03.888756+00:00',2,'2026-12-31T09:00:03.888756+00:00',NULL,NULL,'timer:cooling-off','[]',NULL,NULL,NULL,5);
INSERT INTO "runs" VALUES('v11-16','order','Suspended','lean-1',NULL,'2026-12-01T09:00:04.139776+00:00','2026-12-01T09:00:04.140793+00:00',4,NULL,NULL,NULL,'step:charge','[]',NULL,NULL,NULL,5);
INSERT INTO "runs" VALUES('v11-17','order','Completed','lean-1',NULL,'2026-12-01T09:00:04.390796+00:00','2026-12-01T09:00:04.391813+00:00',6,NULL,NULL,NULL,NULL,'[]',NULL,NULL,NULL,5);
INSERT INTO "runs" VALUES('v11-17/a','item','Completed','lean-1','v11-17','2026-12-01T09:00:04.390796+00:00','2026-12-01T09:00:04.391813+00:00',5,NULL,NULL,NULL,NULL,'[]',NULL,NULL,NULL,5);
INSERT INTO "runs" VALUES('v11-17/b','item','Completed','lean-1','v11-17','2026-12-01T09:00:04.391813+00:00','2026-12-01T09:00:04.391813+00:00',5,NULL,NULL,NULL,NULL,'[]',NULL,NULL,NULL,5);
CREATE TABLE schedules (schedule_id TEXT PRIMARY KEY, spec TEXT NOT NULL, state TEXT NOT NULL, due_at TEXT, version INTEGER NOT NULL);
CREATE TABLE step_heartbeats (run_id TEXT NOT NULL, step_id TEXT NOT NULL, attempt INTEGER NOT NULL, worker TEXT NOT NULL, details TEXT NOT NULL, at TEXT NOT NULL, PRIMARY KEY (run_id, step_id));
CREATE TABLE "step_tasks" (
   "run_id" TEXT,
   "step_id" TEXT,
   "build_id" TEXT NOT NULL,
   "attempt" INTEGER NOT NULL,
   "available_at" TEXT NOT NULL,
   "lease_owner" TEXT, priority INTEGER NOT NULL DEFAULT 5, step_name TEXT,
   PRIMARY KEY ("run_id", "step_id")
);
INSERT INTO "step_tasks" VALUES('v11-04','charge','lean-1',2,'2026-12-02T09:00:01.128553+00:00',NULL,5,'decline');
INSERT INTO "step_tasks" VALUES('v11-10','charge','lean-1',2,'2026-12-02T09:00:02.634673+00:00',NULL,5,'decline');
INSERT INTO "step_tasks" VALUES('v11-16','charge','lean-1',2,'2026-12-02T09:00:04.140793+00:00',NULL,5,'decline');
CREATE TABLE workers (worker_id TEXT PRIMARY KEY, host TEXT NOT NULL, pid INTEGER NOT NULL, builds TEXT NOT NULL, started_at TEXT NOT NULL, heartbeat_at TEXT NOT NULL, heartbeat_seconds REAL NOT NULL, stopped_at TEXT);
CREATE INDEX "runs_created_at"
    ON "runs" ("created_at");
CREATE INDEX runs_status_created ON runs (status, created_at);
CREATE INDEX runs_workflow_created ON runs (workflow, created_at);
CREATE INDEX runs_parent_created ON runs (parent_run_id, created_at);
CREATE INDEX runs_updated ON runs (updated_at);
CREATE INDEX runs_build_created ON runs (substr(build_id, 1), created_at);
CREATE INDEX runs_failing ON runs (created_at) WHERE failing IS NOT NULL;
CREATE INDEX runs_waiting ON runs (created_at) WHERE waiting_on IS NOT NULL;
CREATE INDEX hooks_run ON hooks (run_id, created_at);
CREATE INDEX hooks_open ON hooks (created_at) WHERE resolved = 0;
CREATE INDEX runs_error_type ON runs (error_type, created_at) WHERE error_type IS NOT NULL;
CREATE INDEX schedules_due ON schedules (due_at) WHERE due_at IS NOT NULL;
CREATE INDEX run_attributes_value ON run_attributes (key, value, run_id);
CREATE INDEX runs_priority_due ON runs (priority, decide_at) WHERE decide_at IS NOT NULL;
CREATE INDEX step_tasks_priority_ready ON step_tasks (priority, available_at);
CREATE INDEX limit_starts_name ON limit_starts (name, started_at);
CREATE INDEX run_slots_workflow ON run_slots (workflow, admitted);
COMMIT;
