"""The `apsi` command, a thin shell over the API (apsi.api): app (the typer app, the entry point,
`plan` and `frontier`), commands (models, gpus, export, compare, schema, run, fleet), serve (`apsi
serve`), options (the shared option declarations and helpers) and values (the typed option values
and shell completion)."""
