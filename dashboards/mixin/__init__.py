"""se-exporter's monitoring mixin: the Grafana dashboards and Prometheus rules, as code.

``config`` holds what both share (the metric prefix, selectors, uids); ``grafana`` the panel
building blocks; ``panels`` the panels both dashboards show; ``fleet`` and ``vm`` one dashboard
each; ``recording`` and ``alerts`` the rules. ``dashboards/generate.py`` writes the files.
"""
