"""Campus-security rules: site config, zones, tracking, rule evaluation, events, webhooks.

The app uses ``app.rules.service.facade.RulesService``; see docs/rules.md.
"""

from app.rules.site.schema import SiteConfig, SiteConfigError, load_site_config

__all__ = ["SiteConfig", "SiteConfigError", "load_site_config"]
