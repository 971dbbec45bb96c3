"""t_soak.py — the short soak of `make test`: scripts/soak for about 3 minutes with a fixed seed (at
least 8 faults, every kind of the soak at least once), each verdict line of the soak one PASS/FAIL
here (weights bit-identical to a fault-free replay, latest never lost, neighbours untouched, nothing
left behind, every fault recovered, teardown). The long soak is `make soak`.
Skips (SKIP line) when not root or network namespaces cannot be made."""
import os
import re
import subprocess
import sys

import ztlib

SECONDS, SEED, GAP = 150, 11, 14

if not ztlib.can_netns("unshare") or not os.path.isdir("/sys/fs/cgroup/memory"):
    print("SKIP t_soak: needs root, `ip netns` and the memory cgroup")
    sys.exit(0)
ztlib.ensure_shakespeare()
p = subprocess.run([os.path.join(ztlib.ROOT, "scripts", "soak"), "--seconds", str(SECONDS), "--seed", str(SEED),
                    "--gap", str(GAP)], cwd=ztlib.ROOT, capture_output=True, text=True, timeout=1500)
out = p.stdout
print(out[-6000:])
faults = re.findall(r"\] fault \d+ (\w+) in phase", out)
ztlib.check(len(faults) >= 8 and len(set(faults)) == 8, "soak_fires_8_faults_of_every_kind",
            f"{len(faults)} faults: {sorted(set(faults))}")
verdicts = re.findall(r"\] verdict (\w+): (HELD|BROKEN) — (.*)", out)
for name, state, detail in verdicts:
    ztlib.check(state == "HELD", f"soak_{name}", detail)
ztlib.check(p.returncode == 0 and len(verdicts) >= 6, "soak_passes", f"rc {p.returncode}, {len(verdicts)} verdicts; "
            + p.stderr[-600:])
ztlib.finish()
