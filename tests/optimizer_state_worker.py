"""One rank of the 2-process stage-1 test in test_memory_estimate.py: AdamW state created early per rank
(paddle.distributed.spawn needs an importable function)."""
import json

import paddle
import paddle.distributed as dist
from paddle.distributed import fleet


def allocate_and_report(report: str) -> None:
    from paddle.distributed.fleet.meta_optimizers.dygraph_optimizer.dygraph_sharding_optimizer import \
        DygraphShardingOptimizer

    from paddle_r1.parallel.optimizer_state import allocate_optimizer_state
    from paddle_r1.parallel.sharding import fleet_strategy

    fleet.init(is_collective=True, strategy=fleet_strategy(2))
    paddle.seed(0)
    net = paddle.nn.Sequential(*[paddle.nn.Linear(16, 16) for _ in range(4)])
    optimizer = DygraphShardingOptimizer(paddle.optimizer.AdamW(learning_rate=0.1, parameters=net.parameters()),
                                         fleet.get_hybrid_communicate_group())
    allocated = allocate_optimizer_state(optimizer)
    with open(f"{report}.{dist.get_rank()}", "w") as f:
        owned = optimizer._inner_opt._parameter_list
        json.dump({"allocated": allocated, "owned": sum(int(p.numel()) for p in owned), "tensors": len(owned)}, f)
