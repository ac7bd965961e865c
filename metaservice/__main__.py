from metaservice.cli import app

app()
