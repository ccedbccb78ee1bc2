"""From the user's files and command line to a job config: ``files`` reads yaml/json (a key given twice is an
error naming both lines), ``command_line`` reads ``--key value`` overrides, ``peer_keys`` translates the keys of
PaddleMIX, VLM-R1, TRL and EasyDistill, and ``loading.load_config`` does it all in that order. The keys themselves
and their rules are ``paddle_r1.config.jobs``'s (which checks each value against its key's type and range with
``paddle_r1.config.values``)."""
