"""The server's ``orbit`` commands: ``migrate``, ``service``, ``dev``, ``token`` and ``broker``.

``orbit-server`` adds them to the SDK's ``orbit`` command through the
entry-point group ``orbit.commands`` (``orbit_sdk.cli.app``), which calls
:func:`.plugin.register`. Each command imports what it runs in its body, so ``orbit
--help`` loads only the modules that declare them.

- :mod:`.server`: ``migrate``, ``service`` and ``dev`` (:mod:`.dev` runs the last);
- :mod:`.tokens`: ``orbit token``, API tokens made on the database directly;
- :mod:`.broker`: ``orbit broker``, RabbitMQ's users per role, through
  :mod:`.broker_setup` (the management API) and :mod:`.worker_tasks` (a worker
  user's task patterns, kept in Postgres too);
- :mod:`.settings`: the services' settings as every command reads them.

The commands import one another only downwards (import-linter's "The server's
commands" contract): none of them imports :mod:`.plugin`, which imports them all.
"""
