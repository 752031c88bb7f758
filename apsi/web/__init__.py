"""The web wing: `apsi web`, a local page and a JSON API over the same questions as the CLI
(`pip install 'apsi-planner[web]'`). apsi.web.app builds the FastAPI application, apsi.web.questions
maps an API question to the CLI command that asks it, apsi.web.jobs runs each in a process of its
own, bounded in time, apsi.web.child is what that process runs, and apsi/web/static holds the page.
Nothing outside this package imports it; the base install has no web dependency."""
