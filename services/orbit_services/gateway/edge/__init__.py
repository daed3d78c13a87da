"""The gateway's edge: what every request passes before a route or a page reads it.

:mod:`.guard` refuses a path, query or body the gateway does not take (type,
size); :mod:`.hosts` a ``Host`` it does not serve; :mod:`.auth` finds who asks
(an API token, a JWT checked by :mod:`.jwt_auth`, or a console session) and
gives routes their grant; :mod:`.console_session` keeps a browser's session
cookie and the CSRF token its forms carry. The edge imports nothing of the API
or the console but where the console's pages are
(:mod:`orbit_services.gateway.console.paths`).
"""
