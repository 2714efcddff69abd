"""Drives Turnstile's status page in a real headless Chromium (selenium + chromedriver).

Usage: status_browser.py URL SCREENSHOT. Talks with the Rust test over lines:
  prints LOADED       once the page has drawn from /debug/status;
  reads  FLOODED      then waits at most 2 s for the rule over its limit, the flooding value
                      and the hostile value (as text) in "Who is limited"; prints SEEN;
  reads  STOPPED      (memcached stopped) then waits for a breaker shown open; prints OPEN,
                      saves the screenshot and checks the console: any error fails.
Exits non-zero, saying why, on any failure.
"""

import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By


def fail(why):
    print("FAIL " + why, flush=True)
    sys.exit(1)


def wait(driver, what, deadline, probe):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if probe():
            return
        time.sleep(0.05)
    fail(what + " not shown within %.1f s; the page reads:\n" % deadline
         + driver.find_element(By.TAG_NAME, "body").text)


def expect(line):
    got = sys.stdin.readline().strip()
    if got != line:
        fail("expected %s from the test, got %r" % (line, got))


def main():
    url, screenshot = sys.argv[1], sys.argv[2]
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1100",
                "--disable-dev-shm-usage"]:
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        driver.get(url)
        wait(driver, "the first redraw", 10,
             lambda: driver.find_element(By.TAG_NAME, "body").get_attribute("data-updated"))
        print("LOADED", flush=True)

        expect("FLOODED")
        top = lambda: driver.find_element(By.ID, "top").text
        wait(driver, "the rule over its limit", 2, lambda: "shop.user" in top())
        wait(driver, "the flooding value", 2, lambda: "user=mallory" in top())
        wait(driver, "the hostile value as text", 2,
             lambda: "user=<script>alert(1)</script>" in top())
        scripts = driver.execute_script("return document.querySelectorAll('main script').length")
        if scripts != 0:
            fail("a descriptor value became a script element")
        print("SEEN", flush=True)

        expect("STOPPED")
        wait(driver, "a breaker open", 20, lambda: any(
            cell.text == "open" for cell in driver.find_elements(By.CSS_SELECTOR, "#stores td.open")))
        driver.save_screenshot(screenshot)
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        if errors:
            fail("console errors: %r" % errors)
        print("OPEN", flush=True)
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
