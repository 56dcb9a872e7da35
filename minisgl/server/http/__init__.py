"""The OpenAI-compatible HTTP API. `app.create_app` composes one router per endpoint family
(chat, completions, responses, models, tokenization, probes), each given the same `deps.ApiDeps`;
`protocol` and `responses_protocol` are the request and response bodies; `generation` and
`formats` run a generation request and write its answer; `metrics` is every Prometheus series;
`middleware` the API key and body limits in front of it all."""
