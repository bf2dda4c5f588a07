# Headless Chromium and chromedriver for the admin web page's browser test
# (crates/skyconf-server/tests/it/web.rs, driving tests/web/page_test.py over WebDriver). Debian's
# packages only: the test needs no pip or npm package, and nothing downloads a browser.
apt_install chromium chromium-driver
export SKYCONF_REQUIRE_BROWSER=1
