"""What extends mmspec: installed plugins held to the plugin API (`entry_points`), the catalog
every extension point instantiates (`catalog`), and the code a module can run, for fingerprints
(`import_closure`)."""
