"""One process of a two-process JAX run on localhost, checking ``evalharness.tracking.multihost``.

Run as ``python -m tests.helpers.multihost_worker SEED [CODE]`` with the launcher environment set
(``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID``): it joins, then prints
one JSON line of what each collective returned. ``SEED`` is the config value and ``CODE`` the code
version (default ``same``) that may differ between the processes (to provoke a mismatch); the
logger section always differs.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    seed = int(sys.argv[1])
    code = sys.argv[2] if len(sys.argv) > 2 else "same"
    from evalharness.tracking import multihost

    joined = multihost.join(None)  # before any other JAX call, as the harness does

    import jax
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from kernels.parallel.mesh import make_mesh

    me = jax.process_index()
    mesh = make_mesh(0)
    # Each process holds its half of [0, 1, 2, 3]; the gathered whole must be the same on both.
    local = np.arange(2, dtype=np.float32) + 2 * me
    sharding = NamedSharding(mesh, P("seq"))
    shards = [jax.device_put(local, d) for d in mesh.local_devices]
    global_array = jax.make_array_from_single_device_arrays((4,), sharding, shards)
    report = {
        "joined": joined,
        "process": me,
        "primary": multihost.is_primary(),
        "gathered": multihost.to_host(global_array).tolist(),
        "everywhere_mixed": multihost.everywhere(me == 0),
        "everywhere_all": multihost.everywhere(True),
        "from_primary": multihost.from_primary(me == 0),
    }
    try:
        # Each process's own sweep tag (only process 0 logs): never a mismatch by itself.
        logger = {"tags": {"sweep": f"id-of-process-{me}"}}
        config = {"model": "tiny-planted", "seed": str(seed), "logger": logger}
        multihost.same_config(config, lambda: code)
        report["mismatch"] = None
    except multihost.ConfigMismatch as error:
        report["mismatch"] = str(error)
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
