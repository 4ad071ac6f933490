"""profile -> resolved -> plan -> findings: the typed profile, what it resolves to (checkpoints,
pack, engine), the stage plan (pure), and the rules that judge it. No process is started here."""
