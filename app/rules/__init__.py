"""Campus-security rules: site config, zones, tracking, rule evaluation, events, webhooks.

The app uses ``app.rules.service.RulesService``; see docs/rules.md.
"""

from app.rules.config import SiteConfig, SiteConfigError, load_site_config

__all__ = ["SiteConfig", "SiteConfigError", "load_site_config"]
