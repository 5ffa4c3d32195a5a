"""vllm.plugins: general plugins from the vllm.general_plugins entry points, loaded once
per process; a plugin whose load() (import) fails is logged and skipped, a plugin function
that raises stops the start-up (as in vLLM)."""

import logging
from importlib.metadata import entry_points

import vllm.envs as envs

logger = logging.getLogger(__name__)

DEFAULT_PLUGINS_GROUP = "vllm.general_plugins"
plugins_loaded = False
LOADED = []  # test aid: the plugin names whose functions ran in this process


def load_plugins_by_group(group):
    allowed = envs.VLLM_PLUGINS
    plugins = {}
    for plugin in entry_points(group=group):
        if allowed is None or plugin.name in allowed:
            try:
                plugins[plugin.name] = plugin.load()
            except Exception:
                logger.exception("Failed to load plugin %s", plugin.name)
    return plugins


def load_general_plugins():
    """Plugins can be loaded several times in different processes: they must allow it."""
    global plugins_loaded
    if plugins_loaded:
        return
    plugins_loaded = True
    for name, func in load_plugins_by_group(DEFAULT_PLUGINS_GROUP).items():
        func()
        LOADED.append(name)
