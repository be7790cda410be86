import db

PASSWORD = "hunter2"


def login(user):
    return db.connect(user, PASSWORD)
