"""`gridrail serve`: the policy gateway as an HTTP service (issue 17). The caller's API key —
never the request body — decides the role (`gridrail.serve.keys`); the app is
`gridrail.serve.app.create_app`."""
