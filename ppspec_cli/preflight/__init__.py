"""The preflight layer: the facts gathered once, every rule source through one guard, one verdict
over the findings for the question asked, the one lookup of finding codes, and the pipeline that
prepares and starts a launch. Below the commands (which only render), above planning and running."""
