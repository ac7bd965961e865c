"""`make demo`: a runnable pipeline over the real server, Spark and the three table formats (`python -m demo`).

It lives outside both packages: it drives the client and starts the server the way a user would, from a checkout.
"""
