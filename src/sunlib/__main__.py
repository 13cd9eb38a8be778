from sunlib.cli import run

run()
