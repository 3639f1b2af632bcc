"""Child process for the kill-mid-reconcile test: a controller that creates containers
slowly (a pause between `crun create` and the metadata write, the worst moment to die)."""

import sys
import time

from core.store import MemoryForecastStore, make_forecast
from tests.warmpool.conftest import make_policy
from warmpool.backends.crun import CrunBackend
from warmpool.controller import Controller


class SlowCrun(CrunBackend):
    def _create(self, cid, bundle):
        super()._create(cid, bundle)
        time.sleep(0.4)


def main(state_dir: str, target: int) -> None:
    policy = make_policy(backend="crun", max_warm=target)
    store = MemoryForecastStore()
    now = time.time()
    store.publish(make_forecast("demo/web", origin=now, step_seconds=60, mean=[target] * 3, quantiles={"p90": [target] * 3}, model="t", generated_at=now))
    ctl = Controller(policy, store, {"crun": SlowCrun(state_dir, "crun")})
    print("started", flush=True)
    ctl.step()
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
