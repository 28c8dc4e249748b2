"""Console pages and htmx partials: thin views over ``console.pages`` and the services."""
