"""Console pages and htmx partials: thin views over ``console.page_context`` and the services."""
