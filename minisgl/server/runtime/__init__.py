"""The API process's runtime: the worker processes it starts (`workers`, placed across nodes by
`nodes`), its client of their pipeline (`frontend`), its watch over them and its shutdown
(`supervisor`, writing `state`), and its HTTP connections' hygiene (`connections`). Nothing here
knows HTTP routes: the app (minisgl.server.http) sits above it."""
