from django.urls import path

from kb import views

app_name = "kb"
urlpatterns = [
    path("", views.home, name="home"),
    path("kb/sections/<int:pk>/", views.section, name="section"),
]
