# The re-sync that follows the unchanged look in its execution (tracked-continue.sh), under the
# lock the look took: when the look found the clone and the recorded submodules as the last
# sync left them (look=unchanged, tracked-unchanged.sh), they are not looked at again
# (clean_known=yes: tracked-checkout.sh and sub_checkout ... clean in tracked-modules.sh).
#
# Expects: look (set by the look; unset when it was not run), clean_known.
: "${clean_known?}"
if [ "${look:-}" = unchanged ]; then clean_known=yes; fi
