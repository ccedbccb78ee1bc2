"""Keep the console for paddle_r1's own lines: paddleformers and paddle's checkpoint loader log every
file they touch at INFO."""


def quiet_libraries(level: str = "WARNING") -> None:
    import warnings

    warnings.filterwarnings("ignore")
    from paddle.distributed.fleet.utils.log_util import logger as fleet_logger
    from paddleformers.utils.log import logger

    logger.set_level(level)
    fleet_logger.setLevel(level)
