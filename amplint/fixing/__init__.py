"""Fixes: `edits` applies a file's safe (or unsafe) fixes as text edits, `graph` picks the runtime
fixes (`.to(torch.float32)` at the op a traced graph names), `confirm` joins static findings with
traced ops (`--confirm`). It imports the rules, static and runtime packages below it, never the
pipeline: the step that checks, fixes, traces again and keeps the verified fixes runs checks, so it
is the pipeline's (`amplint.pipeline.verify`)."""
