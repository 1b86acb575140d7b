"""The dtype lockfile: `file` (the `amplint.lock` text format), `record` (a traced graph as the
lockfile's record of a target), `diff` (what changed between two records) and `command` (`amplint
lock`: trace the targets, compare, write). `file`, `record` and `diff` are data and import only the
base modules (`amplint.source`, `amplint.runtime.graph`); `command` sits on top and runs traces."""
