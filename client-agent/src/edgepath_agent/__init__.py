"""EdgePath device agent: collects radio context, asks the service, applies and measures."""
