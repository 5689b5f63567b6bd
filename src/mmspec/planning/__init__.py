"""Planning a sweep before it runs: `mmspec plan` (`plan`), the cost of the jobs still to run
(`stage_costs`), and what it reads from the Hub (`hub_needs`)."""
